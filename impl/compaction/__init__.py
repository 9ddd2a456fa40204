"""Lazy-compaction allocator in torch (kvfuzz issue 4). `IMPLEMENTATIONS` maps a name to a
factory `factory(params, device="cpu") -> TorchCompaction`; factories import lazily, so listing
the names never loads torch.
"""

from __future__ import annotations


def _lazy():
    from kvfuzz.impl.compaction.allocator import TorchCompaction
    return lambda params, device="cpu": TorchCompaction(params, lazy=True, device=device)


def _eager():
    from kvfuzz.impl.compaction.allocator import TorchCompaction
    return lambda params, device="cpu": TorchCompaction(params, lazy=False, device=device)


def _before():
    from kvfuzz.impl.compaction.allocator import TorchCompaction
    from kvfuzz.impl.compaction.pool import PerPageCommitPool
    return lambda params, device="cpu": TorchCompaction(params, lazy=True, device=device,
                                                        pool_class=PerPageCommitPool)


def _mutant(attr: str):
    def load():
        from kvfuzz.impl.compaction import mutants as compaction
        return getattr(compaction, attr)
    return load


def _factory(loader):
    def factory(params, device: str = "cpu"):
        return loader()(params, device)
    return factory


IMPLEMENTATIONS = {
    "compaction.lazy": _factory(_lazy),
    "compaction.eager": _factory(_eager),
    "compaction.before": _factory(_before),
    "mutant.compaction.pending_replaced": _factory(_mutant("pending_replaced")),
    "mutant.compaction.p2v_not_cleared": _factory(_mutant("p2v_not_cleared")),
    "mutant.compaction.kv_not_moved": _factory(_mutant("kv_not_moved")),
}
