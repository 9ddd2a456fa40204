"""A `random.Random` whose randomness is fuzzer bytes, so generators written against `random`
(the compaction and allocator trace generators) become structure-aware byte decoders unchanged.

Every method of `random.Random` draws from `getrandbits` or `random`; both read the next bytes
and read 0 once the bytes run out, which makes every later draw its simplest value and ends any
rejection loop.
"""

from __future__ import annotations

import random


class BytesRandom(random.Random):
    def __init__(self, data: bytes):
        self._data, self._pos = bytes(data), 0
        super().__init__(0)

    def seed(self, *args, **kwargs) -> None:  # called by Random.__init__; the bytes are the seed
        super().seed(0)

    def getrandbits(self, k: int) -> int:
        width = (k + 7) // 8
        chunk = self._data[self._pos:self._pos + width]
        self._pos += width
        return int.from_bytes(chunk, "big") & ((1 << k) - 1) if chunk else 0

    def random(self) -> float:
        return self.getrandbits(53) / (1 << 53)
