"""The KV cache an allocator is built with, for the allocator target: records the offload calls
the allocator hands to it. SGLang's allocators own no KV data; `get_cpu_copy(indices)` and
`load_cpu_copy(copy, indices)` (a request's KV to host memory and back, when it is retracted or
the pool is released) are theirs to pass to the KV cache they were built with, unchanged. What
reached the cache is read back in plain ints (`AllocatorDriver.offload_roundtrip`)."""

from __future__ import annotations

from kvfuzz.impl.driver_calls import int_list


class HostCopy:
    """What `get_cpu_copy` returns: a token standing for the host copy of those slots."""


class RecordingKVCache:
    def __init__(self):
        self.calls: list = []

    def get_cpu_copy(self, indices, *args, **kwargs):
        copy = HostCopy()
        self.calls.append(["get_cpu_copy", int_list(indices), copy])
        return copy

    def load_cpu_copy(self, kv_cache_cpu, indices, *args, **kwargs):
        self.calls.append(["load_cpu_copy", int_list(indices), kv_cache_cpu])
