"""The KV events vLLM's `BlockPool` (vllm 0.33.0) publishes, as the block-pool model says them
(`strategies.blockpool.events` types), and the invariant any consumer relies on: replaying the
events gives exactly the entries the pool holds.

- A `cache_full_blocks` call publishes one `Stored` for blocks [num_cached, num_full): the
  hashes of the blocks it cached (null and masked blocks left out, so it may hold none), the
  parent (the hash of block num_cached - 1, None at 0), the tokens of the whole range, the
  block size, the group; per cached block its extra keys (each multimodal input overlapping
  it or its lookahead tokens, with its offset from the block's start, then the cache salt on
  block 0; None for a block without; None for the list when no block was cached) and, with
  lookahead hashing, the `lookahead` tokens after it.
- A partial entry (`cache_partial_block`) publishes a `Stored` of one hash unit: its hash, the
  hash of the unit before (None for the first), the unit's tokens, block size the hash block
  size; nothing when the block already had that entry.
- A hit reported (`emit_cached_block_events`) publishes one `Stored` of the first n blocks, as
  if cached from block 0, extra keys for every block.
- Every entry that leaves the cache publishes a `Removed` of its hash; a reset, `Cleared`.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter

from kvfuzz.oracle.counts import same_counts
from kvfuzz.strategies.blockpool.events import IMAGE, SALT, Cleared, Prompt, Removed, Stored


def block_hashes(prompt: Prompt, scale: int) -> list:
    """The hashes at a block of `scale` hash units: each block's last unit's."""
    return list(prompt.hashes[scale - 1::scale])


def extra_keys(prompt: Prompt, start: int, end: int):
    """The extra keys of tokens [start, end) as an event publishes them: the LoRA adapter's
    name, each multimodal input that overlaps them, (identifier, its offset from `start`), in
    order, then the cache salt if they start the request; None for none."""
    ids = prompt.image_ids or [IMAGE.format(i) for i in range(len(prompt.images))]
    keys = [prompt.lora] if prompt.lora else []
    keys += [(ids[i], offset - start) for i, (offset, length) in enumerate(prompt.images)
             if offset < end and offset + length > start]
    if prompt.salt and start == 0:
        keys.append(SALT if prompt.salt is True else prompt.salt)
    if prompt.embeds:
        keys.append(embeds_digest(prompt.embeds, start, end))
    return tuple(keys) or None


def embeds_digest(embeds, start: int, end: int) -> bytes:
    """vLLM's key of a block of a request with prompt embeddings: SHA-256 of the raw bytes of
    the prompt's embeddings at positions [start, end) (fewer, or none, past the prompt's end:
    the slice of the prompt tensor), here one little-endian float32 a position."""
    values = embeds[start:end]
    return hashlib.sha256(struct.pack(f"<{len(values)}f", *values)).digest()


def stored(prompt: Prompt, hashes: list[int], parent: int | None, start: int, end: int,
           block_size: int, group: int, starts: list[int], lookahead: int) -> Stored:
    """One `Stored`: `hashes` (of the blocks starting at `starts`) over tokens [start, end);
    a block's extra keys cover its lookahead tokens too, as its hash does."""
    keys = tuple(extra_keys(prompt, s, s + block_size + lookahead) for s in starts) or None
    # (each a tuple, as the implementation's events read: a caller's tokens may be a list)
    ahead = tuple(tuple(prompt.tokens[s + block_size:s + block_size + lookahead])
                  for s in starts) if lookahead else None
    return Stored(tuple(hashes), parent, tuple(prompt.tokens[start:end]), block_size, group,
                  keys, ahead)


def removed(key: tuple[int, int]) -> Removed:
    return Removed((key[0],), key[1])


def cleared() -> Cleared:
    return Cleared()


def canonical(events) -> list:
    """`events` with each run of `Removed` in a fixed order: a block's extra entries leave in a
    set's order in vLLM (by their bytes' hash, which varies per process), and a consumer's view
    after a run of removals does not depend on its order."""
    out, run = [], []
    for event in list(events) + [None]:
        if isinstance(event, Removed):
            run.append(event)
            continue
        out += sorted(run, key=lambda e: (e.hashes, -1 if e.group is None else e.group))
        run = []
        if event is not None:
            out.append(event)
    return out


def replay(view: Counter, events) -> Counter:
    """A consumer's view (how many blocks hold each (hash, group)) after `events`. Only counts
    above zero are kept (what `same_counts` needs); a view with no events is returned as is,
    not copied (the judge replays after every pool call, most of which publish nothing)."""
    if not events:
        return view
    for event in events:
        if isinstance(event, Cleared):
            view = Counter()
        elif isinstance(event, Stored):
            view.update((h, event.group) for h in event.hashes)
        elif isinstance(event, Removed):
            view.subtract((h, event.group) for h in event.hashes)
    return +view


def event_violations(view: Counter, cache: dict) -> list[str]:
    """What a consumer that replayed every event believes and the pool's hash map disagree on:
    an entry it would route to that is gone, or one it never heard of."""
    holds = Counter({key: len(blocks) for key, blocks in cache.items() if blocks})
    if same_counts(view, holds):
        return []
    key = next(k for k in sorted(set(view) | set(holds)) if view[k] != holds[k])
    return [f"the KV events say hash {key[0]} (group {key[1]}) is cached in {view[key]} "
            f"block(s), the pool's map holds it in {holds[key]}"]
