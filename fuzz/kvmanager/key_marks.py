"""The edge classes of requests with extra hash keys (LoRA, cache salt, multimodal inputs; the
"extra keys" profile), counted by the kvmanager judge: a hit on blocks whose keys are equal, and
a hit refused where the same tokens are cached under other keys (the manager must not share
them), by which key differs. Counting only: the verdict is the lock step's (the hits, the hash
map, the events).

A refused hit is read off the oracle's pool: at an admission whose hit stops at hash block j,
block j's tokens (chained over the same prefix of tokens) are cached under another request's
keys but not under this one's. Each request's hashes are recorded by their token-only twin (the
chain without extra keys) with the keys that applied up to that block.
"""

from __future__ import annotations

from kvfuzz.oracle.kvmanager.extra_keys import block_extra_keys
from kvfuzz.strategies.kvmanager.hashing import chain_from

CONFIGS = {
    "LoRA": lambda t: any(getattr(op, "lora", "") for op in t.ops),
    "cache salt": lambda t: any(getattr(op, "salt", "") for op in t.ops),
    "multimodal inputs": lambda t: any(getattr(op, "images", ()) for op in t.ops)}
KINDS = ("LoRA", "salted", "multimodal")
MARKS = (*(f"{kind} hit" for kind in KINDS), *(f"{kind} hit refused" for kind in KINDS),
         "mm block split")


class KeyMarks:
    def __init__(self, count, hash_size: int):
        self.count, self.size = count, hash_size
        # token-only hash -> {keyed hash: the keys that applied up to that block}
        self.twins: dict[int, dict[int, tuple]] = {}

    def arrived(self, keys, num_tokens: int) -> None:
        """An image whose placeholders cross a hash block's boundary: blocks on both sides
        carry it, each with its own offset."""
        size = self.size
        if any(offset // size != (offset + length - 1) // size
               for _, offset, length in keys.images if offset + length <= num_tokens):
            self.count("mm block split")

    def admitted(self, request, hashes: list[int], hit: int, pool) -> None:
        if not request.keys and not self.twins:
            return
        plain = chain_from(None, request.tokens[:len(hashes) * self.size], self.size)
        signatures = self._signatures(request.keys, len(hashes))
        for token_hash, keyed, signature in zip(plain, hashes, signatures):
            self.twins.setdefault(token_hash, {})[keyed] = signature
        if hit and request.keys:
            self._hit_kinds(request.keys, hit)
        stop = hit // self.size
        if request.skip or stop >= min(len(hashes), (len(request.tokens) - 1) // self.size):
            return
        if (hashes[stop], 0) in pool.map:
            return  # its own block is cached: the hit stopped for another reason
        mine = signatures[stop]
        for keyed, theirs in self.twins.get(plain[stop], {}).items():
            if keyed != hashes[stop] and (keyed, 0) in pool.map:
                for kind, ours, other in zip(KINDS, mine, theirs):
                    if ours != other:
                        self.count(f"{kind} hit refused")
                return

    def _signatures(self, keys, count: int) -> list[tuple]:
        """Per hash block, (LoRA, salt, the images' keys so far): what its hash carries
        besides its tokens."""
        lora, salt, images, out = (keys.lora, keys.lora_path), keys.salt, (), []
        for index in range(count):
            found = block_extra_keys(keys, index * self.size, (index + 1) * self.size) or ()
            images += tuple(key for key in found if key[0] == "mm")
            out.append((lora, salt, images))
        return out

    def _hit_kinds(self, keys, hit: int) -> None:
        if keys.lora:
            self.count("LoRA hit")
        if keys.salt:
            self.count("salted hit")
        if any(offset < hit for _, offset, _ in keys.images):
            self.count("multimodal hit")
