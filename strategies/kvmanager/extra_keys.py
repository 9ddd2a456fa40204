"""The "extra keys" profile (`kvmanager/5[extra keys]`, a stream of its own): requests that carry
what vLLM folds into their block hashes besides the tokens (`Arrive.keys`): a LoRA adapter, a
cache salt, multimodal inputs. Standard library only.

Aimed at sharing decided by the keys alone: a few prompt families, each with an image's
placeholder tokens (one token id, as a processor writes them) at a fixed place in most, so that
requests with equal tokens differ only in their keys: two adapters (one of them sometimes
re-pointed at another path), two salts, two images that fill the same placeholders, and the
same image one token later or earlier over the same tokens (its offset in the block differs).
Half of the requests carry no key, half of the traces publish KV events (whose extra keys are
compared), some hits are reported, and some traces have a sliding window. The corner profiles'
engine settings otherwise (`generator.build_corners`' choices), one block size, hashed per
block.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import generator
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "extra keys"
PLACEHOLDER = 9999  # an image's placeholder token (outside the families' vocabulary)
ADAPTERS, SALTS, IMAGES = ("adapter-a", "adapter-b"), ("tenant-1", "tenant-2"), \
    ("image-0", "image-1", "image-2")


def build(rng: random.Random, num_ops: int) -> Trace:
    block_size = rng.choice((1, 2, 4, 4, 8))
    window = 0 if rng.random() < 0.7 else rng.randint(2, 4 * block_size)
    blocks = rng.choice((rng.randint(4, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(4, 12) * block_size + rng.randint(0, 3)))
    retention = rng.choice((None, 0, 0))
    fit = rng.random() < 0.5
    events = rng.random() < 0.5
    settings = {"events": events, "report": events and rng.random() < 0.4,
                "stats": rng.random() < 0.3}
    gen = _Keyed(rng, block_size, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(blocks, block_size, window, max_model_len, tuple(gen.ops[:num_ops]), retention,
                 fit, **settings, note=f"profile {PROFILE}")


class _Keyed(generator._Generator):
    """The corner generator whose requests carry extra keys; each family has an image slot."""

    def __init__(self, rng: random.Random, block_size: int, max_model_len: int):
        super().__init__(rng, block_size, max_model_len)
        self.slots = []  # per family: its image's (offset, length), or None
        for family in self.families:
            if len(family) >= 2 and rng.random() < 0.8:
                offset = rng.randrange(len(family) - 1)
                length = rng.randint(1, min(2 * block_size + 1, len(family) - offset))
                family[offset:offset + length] = [PLACEHOLDER] * length
                self.slots.append((offset, length))
            else:
                self.slots.append(None)

    def arrive(self) -> None:
        rng, bs = self.rng, self.block_size
        index = rng.randrange(len(self.families))
        base = self.families[index]
        cut = min(len(base), max(0, rng.randint(0, len(base) // bs) * bs
                                 + rng.choice((-1, 0, 0, 0, 1))))
        tokens = base[:cut] + [rng.randrange(generator.VOCAB)
                               for _ in range(rng.randint(0, 2 * bs))]
        tokens = (tokens or [rng.randrange(generator.VOCAB)])[:max(1, self.max_len - 1)]
        self.next_rid += 1
        self.live.append(self.next_rid)
        keys = self.keys(tokens, self.slots[index]) if rng.random() < 0.6 else {}
        self.ops.append(Arrive(self.next_rid, tuple(tokens), rng.random() < 0.03, **keys))
        if rng.random() < 0.7:
            self.ops.append(Schedule(self.next_rid, self.chunk()))

    def keys(self, tokens: list[int], slot) -> dict:
        return draw_keys(self.rng, self.block_size, tokens, slot)


def draw_keys(rng: random.Random, block_size: int, tokens: list[int], slot) -> dict:
    """Some of a LoRA adapter, a salt and images, each drawn from two or three; `slot`: where
    the request's family has its image placeholders, (offset, length), or None."""
    keys = {}
    if rng.random() < 0.4:
        name = rng.choice(ADAPTERS)
        # the same name re-pointed at another adapter (a tenth)
        version = 2 if rng.random() < 0.1 else 1
        keys |= {"lora": name, "lora_path": f"/adapters/{name}/v{version}"}
    if rng.random() < 0.35:
        keys["salt"] = rng.choice(SALTS)
    images = []
    if slot and rng.random() < 0.8:
        offset, length = slot
        offset += rng.choice((0, 0, 0, -1, 1))  # the same image, one token off
        offset = max(0, offset)
        if offset + length <= len(tokens):
            images.append((rng.choice(IMAGES[:2]), offset, length))
    end = images[-1][1] + images[-1][2] if images else 0
    if len(tokens) - end >= 2 and rng.random() < 0.3:  # another image after it
        offset = rng.randrange(end, len(tokens) - 1)
        length = rng.randint(1, min(2 * block_size, len(tokens) - offset))
        images.append((rng.choice(IMAGES), offset, length))
    if images:
        keys["images"] = tuple(images)
    return keys


def with_keys(rng: random.Random, ops, block_size: int) -> tuple:
    """`ops` with half of their requests given extra keys, drawn as this profile draws them
    (an adapter, a salt, images of two or three), from a stream of their own seeded by one
    draw of `rng` (the ops stay as `rng` made them): what the newer profiles ("lookahead
    hashes", "eagle groups", "mtp", "prompt embeds") combine with their own hashing rule. Images
    sit at one of two places per trace, so that siblings' equal images share blocks."""
    keyed = random.Random(rng.random())
    slots = [(keyed.randrange(4 * block_size), keyed.randint(1, 2 * block_size + 1))
             for _ in range(2)]
    drawn = []
    for op in ops:
        if isinstance(op, Arrive) and keyed.random() < 0.5:
            slot = keyed.choice(slots)
            fits = slot[0] + slot[1] <= len(op.tokens)
            op = replace(op, **draw_keys(keyed, block_size, list(op.tokens),
                                         slot if fits else None))
        drawn.append(op)
    return tuple(drawn)


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[extra keys]", build, num_ops=200, max_fuzz_ops=200)
