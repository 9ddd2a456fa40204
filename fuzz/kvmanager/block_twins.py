"""The hashes seen for each block over a trace's admissions (a block: its parent's hash and its
tokens), for the edge classes of profiles where one block can hash two ways (lookahead hashing,
prompt embeddings): a hit refused where the same block is cached under another hash."""

from __future__ import annotations


class BlockTwins:
    def __init__(self, count, block_size: int):
        self.count, self.size = count, block_size
        # (parent hash, block tokens) -> the hashes seen for that block
        self.twins: dict[tuple, set[int]] = {}

    def record(self, tokens, hashes: list[int]) -> None:
        for index, block_hash in enumerate(hashes):
            self.twins.setdefault(self._key(hashes, tokens, index), set()).add(block_hash)

    def cached_as_a_twin(self, tokens, hashes: list[int], stop: int, pool) -> bool:
        """Block `stop` is not cached under its own hash, and is under another."""
        return (hashes[stop], 0) not in pool.map and any(
            (other, 0) in pool.map and other != hashes[stop]
            for other in self.twins.get(self._key(hashes, tokens, stop), ()))

    def _key(self, hashes: list[int], tokens, index: int) -> tuple:
        size = self.size
        return (hashes[index - 1] if index else None,
                tuple(tokens[index * size:(index + 1) * size]))
