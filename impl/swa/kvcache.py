"""The KV pool an SWA allocator is constructed with, reduced to what the allocator uses: it
receives the full-to-SWA mapping (`register_mapping`) and translates full slots through it, and
copies a request's KV to the host and back (`get_cpu_copy`, `load_cpu_copy`: it records what it
was handed, and its copy is a token naming the slots).
Upstream asserts `isinstance(kvcache, BaseSWAKVPool)`: when SGLang's module is loaded, this class
is registered as a virtual subclass of that ABC (it stores no KV, so nothing else is needed).
Before 0.5.12 the allocator asserted `SWAKVPool`, an ABC's subclass of its own module: the pool
classes the allocator's module names are read, whatever the release."""

from __future__ import annotations

import abc
import sys

_UPSTREAM_BASE = ("sglang.srt.mem_cache.base_swa_memory_pool", "BaseSWAKVPool")
_ASSERTED = ("BaseSWAKVPool", "SWAKVPool")  # what an allocator's module may assert it is


class MappingOnlyKVPool:
    full_kv_pool = None
    swa_kv_pool = None
    swa_req_ring_size = None  # no per-request SWA ring: both pools are paged

    def __init__(self):
        self.full_to_swa_index_mapping = None
        self.copies: list = []  # what get_cpu_copy and load_cpu_copy were handed, in order

    def register_mapping(self, mapping) -> None:
        self.full_to_swa_index_mapping = mapping

    def translate_loc_from_full_to_swa(self, indices):
        return self.full_to_swa_index_mapping[indices]

    def get_cpu_copy(self, indices, mamba_indices=None, req_pool_index=None):
        copy = HostCopy(len(self.copies))
        self.copies.append(("get_cpu_copy", indices.tolist(), mamba_indices, req_pool_index))
        return copy

    def load_cpu_copy(self, kv_cache_cpu, indices, mamba_indices=None, req_pool_index=None):
        self.copies.append(("load_cpu_copy", indices.tolist(), mamba_indices, req_pool_index,
                            getattr(kv_cache_cpu, "serial", repr(kv_cache_cpu))))

    def host_copies(self, copy) -> list:
        """Every copy call so far as plain values (`copy`, what the allocator handed back, by
        its serial), then forgotten."""
        seen, self.copies = self.copies, []
        return [list(call) for call in seen] + [getattr(copy, "serial", repr(copy))]


class HostCopy:
    """A host copy of KV rows, as the caller holds it between the two calls."""

    def __init__(self, serial: int):
        self.serial = serial


def stand_in_kvcache(cls=None) -> MappingOnlyKVPool:
    """The stand-in, a virtual subclass of the pool class SGLang's allocator `cls` (or its
    current module) asserts: the first of `_ASSERTED` each module has (a concrete pool class
    stays out of every `isinstance` where a base class serves)."""
    modules = [sys.modules.get(_UPSTREAM_BASE[0]), sys.modules.get(getattr(cls, "__module__", ""))]
    for module in filter(None, modules):
        base = next(filter(None, (getattr(module, name, None) for name in _ASSERTED)), None)
        if isinstance(base, abc.ABCMeta):
            base.register(MappingOnlyKVPool)
    return MappingOnlyKVPool()
