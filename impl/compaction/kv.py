"""The KV store: one byte buffer shared by both pools, so a frontier overlap corrupts the other
pool's data. Page p of a pool with `epp` bytes per page owns bytes [p*epp, (p+1)*epp).
"""

from __future__ import annotations

import torch


class SharedKV:
    def __init__(self, total_bytes: int, device: str | torch.device = "cpu"):
        self.buffer = torch.zeros(total_bytes, dtype=torch.uint8, device=device)

    def pool_view(self, num_pages: int, epp: int) -> torch.Tensor:
        """A [num_pages, epp] view: compaction copies rows of it, writes land in the buffer."""
        return self.buffer[:num_pages * epp].view(num_pages, epp)

    @staticmethod
    def write(view: torch.Tensor, pages: torch.Tensor, payloads: list[bytes]) -> None:
        rows = torch.frombuffer(bytearray(b"".join(payloads)), dtype=torch.uint8)
        view.index_copy_(0, pages, rows.view(len(payloads), -1).to(view.device))

    @staticmethod
    def read_all(view: torch.Tensor) -> list[bytes]:
        """Every page's bytes, for the harness (a host copy: never call it inside a flush)."""
        flat = view.cpu().numpy().tobytes()
        width = view.shape[1]
        return [flat[start:start + width] for start in range(0, len(flat), width)]
