"""Counts host synchronisations on CPU: every point where torch code reads a tensor value on the
host or makes an output shape depend on data. On a GPU each of these stalls the stream; on CPU
nothing stalls, so the count is the only way CI can see them.

    with count_host_syncs() as syncs:
        fn(...)
    assert syncs.total == 0, syncs.describe()
"""

from __future__ import annotations

import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
# .item(), bool(t), int(t), t.__index__ (slice bounds, range(t)) all reach this one op.
_SCALAR_READ = {_aten._local_scalar_dense.default}
# Ops whose output length depends on tensor values: the host must learn the data first.
_DATA_DEPENDENT = {
    _aten.nonzero.default, _aten.masked_select.default, _aten.unique_consecutive.default,
    _aten._unique2.default, _aten.unique_dim.default,
}
_HOST_COPIES = {"tolist", "numpy"}  # never reach the dispatcher as an op


@dataclass
class HostSyncs:
    events: list[tuple[str, str]] = field(default_factory=list)  # (kind, where in user code)

    @property
    def total(self) -> int:
        return len(self.events)

    def by_kind(self) -> Counter:
        return Counter(kind for kind, _ in self.events)

    def describe(self, limit: int = 5) -> str:
        if not self.events:
            return "no host synchronisation"
        lines = [f"{self.total} host synchronisations: {dict(self.by_kind())}"]
        lines += [f"  {kind} at {where}" for kind, where in self.events[:limit]]
        return "\n".join(lines)

    def record(self, kind: str) -> None:
        self.events.append((kind, _caller()))


def _caller() -> str:
    for frame in reversed(traceback.extract_stack(limit=16)):
        if "/torch/" not in frame.filename and not frame.filename.endswith("host_sync.py"):
            return f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
    return "?"


def _is_data_dependent(func, args, kwargs) -> bool:
    if func in _DATA_DEPENDENT:
        return True
    if func is _aten.repeat_interleave.Tensor:
        return kwargs.get("output_size") is None and (len(args) < 2 or args[1] is None)
    if func is _aten.index.Tensor:  # boolean-mask indexing
        return any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1])
    return False


class _DispatchCounter(TorchDispatchMode):
    def __init__(self, syncs: HostSyncs):
        super().__init__()
        self.syncs = syncs

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SCALAR_READ:
            self.syncs.record("scalar read")
        elif _is_data_dependent(func, args, kwargs):
            self.syncs.record(f"data-dependent shape ({func.__name__})")
        return func(*args, **kwargs)


class _FunctionCounter(TorchFunctionMode):
    def __init__(self, syncs: HostSyncs):
        super().__init__()
        self.syncs = syncs

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in _HOST_COPIES:
            self.syncs.record(f"host copy ({func.__name__})")
        return func(*args, **(kwargs or {}))


@contextmanager
def count_host_syncs():
    syncs = HostSyncs()
    with _FunctionCounter(syncs), _DispatchCounter(syncs):
        yield syncs
