"""The edge classes of prompts given as embeddings (the "prompt embeds" profile), counted by the
kvmanager judge at each admission of such a request: a hit, and a hit refused where a block of
the same token ids (vLLM's zeros) after the same parent is cached under other embeddings (or
as a prompt of token ids). Counting only: the verdict is the lock step's (the hits, the hash
map, the events)."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.block_twins import BlockTwins

CONFIGS = {"prompt embeddings": lambda t: any(getattr(op, "embeds", False) for op in t.ops)}
MARKS = ("prompt embeds hit",
         "prompt embeds hit refused: the same token ids cached under other embeddings")


class EmbedsMarks(BlockTwins):
    def admitted(self, request, hashes: list[int], hit: int, pool) -> None:
        size, tokens = self.size, request.tokens
        self.record(tokens, hashes)
        if not request.keys.embeds:
            return
        if hit:
            self.count(MARKS[0])
        stop = hit // size
        if request.skip or stop >= min(len(hashes), (len(tokens) - 1) // size):
            return
        if self.cached_as_a_twin(tokens, hashes, stop, pool):
            self.count(MARKS[1])
