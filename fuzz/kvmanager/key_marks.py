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

import weakref

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
        # per request: its token-only chain and each block's keys so far, extended as its
        # hashes are (recomputing them at every admission is quadratic in a long request)
        self.chains: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

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
        plain, signatures = self._extended(request, hashes)
        if hit and request.keys:
            self._hit_kinds(request.keys, hit)
        stop = hit // self.size
        if request.skip or stop >= min(len(hashes), (len(request.tokens) - 1) // self.size):
            return
        if (hashes[stop], 0) in pool.map:
            return  # its own block is cached: the hit stopped for another reason
        mine = signatures[stop]
        # of the cached twins, the nearest (the fewest kinds of key apart) says why
        differences = [[kind for kind, ours, other in zip(KINDS, mine, theirs) if ours != other]
                       for keyed, theirs in self.twins.get(plain[stop], {}).items()
                       if keyed != hashes[stop] and (keyed, 0) in pool.map]
        for kind in min(differences, key=len, default=()):
            self.count(f"{kind} hit refused")

    def _extended(self, request, hashes: list[int]) -> tuple[list[int], list[tuple]]:
        """The request's token-only hashes and per-block signatures (LoRA, salt, a digest of
        the images' keys so far: what its hash carries besides its tokens), as far as its
        hashes go, each new block recorded as a twin of its token-only hash."""
        plain, signatures = self.chains.setdefault(request, ([], []))
        done, size, keys = len(plain), self.size, request.keys
        if done < len(hashes):
            plain += chain_from(plain[-1] if plain else None,
                                request.tokens[done * size:len(hashes) * size], size, done * size)
            images = signatures[-1][2] if signatures else 0
            for index in range(done, len(hashes)):
                found = block_extra_keys(keys, index * size, (index + 1) * size) or ()
                images = hash((images, tuple(key for key in found if key[0] == "mm")))
                signatures.append(((keys.lora, keys.lora_path), keys.salt, images))
                self.twins.setdefault(plain[index], {})[hashes[index]] = signatures[index]
        return plain, signatures

    def _hit_kinds(self, keys, hit: int) -> None:
        if keys.lora:
            self.count("LoRA hit")
        if keys.salt:
            self.count("salted hit")
        if any(offset < hit for _, offset, _ in keys.images):
            self.count("multimodal hit")
