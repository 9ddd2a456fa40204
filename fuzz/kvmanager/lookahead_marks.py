"""The edge classes of lookahead hashing (the "lookahead hashes" profile), counted by the
kvmanager judge at each admission: a hit that stops where the request's next block has no hash
yet (the tokens after it not there: the prompt's last full block), and a hit refused where the
same block (the same parent, the same tokens) is cached followed by other tokens; and, marked by
the oracle, a step that computed a full block it cannot cache yet. Counting only:
the verdict is the lock step's (the hits, the hash map, the events)."""

from __future__ import annotations

MARKS = ("lookahead hashing: hit stops where the next block's tokens run out",
         "lookahead hashing: hit refused, the block cached before other tokens",
         # the oracle's own mark (`KVManagerModel.cache_blocks`)
         "lookahead hashing: a computed block waits for its next tokens")


class LookaheadMarks:
    def __init__(self, count, block_size: int):
        self.count, self.size = count, block_size
        # (parent hash, block tokens) -> the hashes seen for that block (one per lookahead)
        self.twins: dict[tuple, set[int]] = {}

    def admitted(self, request, hashes: list[int], hit: int, pool) -> None:
        size, tokens = self.size, request.tokens
        for index, block_hash in enumerate(hashes):
            self.twins.setdefault(self._key(hashes, tokens, index), set()).add(block_hash)
        stop = hit // size
        if request.skip or stop >= (len(tokens) - 1) // size:
            return  # no block left that the hit could have taken
        if stop == len(hashes):
            self.count(MARKS[0])
        elif (hashes[stop], 0) not in pool.map and any(
                (other, 0) in pool.map and other != hashes[stop]
                for other in self.twins.get(self._key(hashes, tokens, stop), ())):
            self.count(MARKS[1])

    def _key(self, hashes: list[int], tokens, index: int) -> tuple:
        size = self.size
        return (hashes[index - 1] if index else None,
                tuple(tokens[index * size:(index + 1) * size]))
