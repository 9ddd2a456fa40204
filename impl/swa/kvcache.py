"""The KV pool an SWA allocator is constructed with, reduced to what the allocator uses: it
receives the full-to-SWA mapping (`register_mapping`) and translates full slots through it.
Upstream asserts `isinstance(kvcache, BaseSWAKVPool)`: when SGLang's module is loaded, this class
is registered as a virtual subclass of that ABC (it stores no KV, so nothing else is needed)."""

from __future__ import annotations

import sys

_UPSTREAM_BASE = ("sglang.srt.mem_cache.base_swa_memory_pool", "BaseSWAKVPool")


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


def stand_in_kvcache() -> MappingOnlyKVPool:
    module = sys.modules.get(_UPSTREAM_BASE[0])
    if module is not None:
        getattr(module, _UPSTREAM_BASE[1]).register(MappingOnlyKVPool)
    return MappingOnlyKVPool()
