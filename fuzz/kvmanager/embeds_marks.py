"""The edge classes of prompts given as embeddings (the "prompt embeds" profile), counted by the
kvmanager judge at each admission of such a request: a hit, and a hit refused where a block of
the same token ids (vLLM's zeros) after the same parent is cached under other embeddings (or
as a prompt of token ids). Counting only: the verdict is the lock step's (the hits, the hash
map, the events)."""

from __future__ import annotations

CONFIGS = {"prompt embeddings": lambda t: any(getattr(op, "embeds", False) for op in t.ops)}
MARKS = ("prompt embeds hit",
         "prompt embeds hit refused: the same token ids cached under other embeddings")


class EmbedsMarks:
    def __init__(self, count, block_size: int):
        self.count, self.size = count, block_size
        # (parent hash, block token ids) -> the hashes seen for that block
        self.twins: dict[tuple, set[int]] = {}

    def admitted(self, request, hashes: list[int], hit: int, pool) -> None:
        size, tokens = self.size, request.tokens
        for index, block_hash in enumerate(hashes):
            self.twins.setdefault(self._key(hashes, tokens, index), set()).add(block_hash)
        if not request.keys.embeds:
            return
        if hit:
            self.count(MARKS[0])
        stop = hit // size
        if request.skip or stop >= min(len(hashes), (len(tokens) - 1) // size):
            return
        if (hashes[stop], 0) not in pool.map and any(
                (other, 0) in pool.map and other != hashes[stop]
                for other in self.twins.get(self._key(hashes, tokens, stop), ())):
            self.count(MARKS[1])

    def _key(self, hashes: list[int], tokens, index: int) -> tuple:
        size = self.size
        return (hashes[index - 1] if index else None,
                tuple(tokens[index * size:(index + 1) * size]))
