"""The edge classes of lookahead hashing (the "lookahead hashes" profile), counted by the
kvmanager judge at each admission: a hit that stops where the request's next block has no hash
yet (the tokens after it not there: the prompt's last full block), and a hit refused where the
same block (the same parent, the same tokens) is cached followed by other tokens; and, marked by
the oracle, a step that computed a full block it cannot cache yet. Counting only:
the verdict is the lock step's (the hits, the hash map, the events)."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.block_twins import BlockTwins

MARKS = ("lookahead hashing: hit stops where the next block's tokens run out",
         "lookahead hashing: hit refused, the block cached before other tokens",
         # the oracle's own mark (`KVManagerModel.cache_blocks`)
         "lookahead hashing: a computed block waits for its next tokens")


class LookaheadMarks(BlockTwins):
    # (the hashes seen for a block: one per lookahead, the tokens after it)
    def admitted(self, request, hashes: list[int], hit: int, pool) -> None:
        size, tokens = self.size, request.tokens
        self.record(tokens, hashes)
        stop = hit // size
        if request.skip or stop >= (len(tokens) - 1) // size:
            return  # no block left that the hit could have taken
        if stop == len(hashes):
            self.count(MARKS[0])
        elif self.cached_as_a_twin(tokens, hashes, stop, pool):
            self.count(MARKS[1])
