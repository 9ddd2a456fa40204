"""The KV store: one byte buffer shared by both pools, so a frontier overlap corrupts the other
pool's data. Page p of a pool with `epp` bytes per page owns bytes [p*epp, (p+1)*epp).
"""

from __future__ import annotations

import torch


class SharedKV:
    def __init__(self, total_bytes: int):
        self.buffer = torch.zeros(total_bytes, dtype=torch.uint8)

    def pool_view(self, num_pages: int, epp: int) -> torch.Tensor:
        """A [num_pages, epp] view: compaction copies rows of it, writes land in the buffer."""
        return self.buffer[:num_pages * epp].view(num_pages, epp)

    @staticmethod
    def write(view: torch.Tensor, pages: torch.Tensor, payloads: list[bytes]) -> None:
        view[pages] = torch.tensor([list(payload) for payload in payloads], dtype=torch.uint8)

    @staticmethod
    def read(view: torch.Tensor, pages: list[int]) -> list[bytes]:
        rows = view[torch.tensor(pages, dtype=torch.int64)].tolist()
        return [bytes(row) for row in rows]
