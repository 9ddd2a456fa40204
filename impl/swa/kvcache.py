"""The KV pool an SWA allocator is constructed with, reduced to what the allocator uses: it
receives the full-to-SWA mapping (`register_mapping`) and translates full slots through it.
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

    def register_mapping(self, mapping) -> None:
        self.full_to_swa_index_mapping = mapping

    def translate_loc_from_full_to_swa(self, indices):
        return self.full_to_swa_index_mapping[indices]


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
