"""The base of the HiSparse tests' doubles of the released `KVCacheManager`
(`test_hisparse_lag.py`, `test_hisparse_pins.py`): a subclass whose HiSparse coordinator, built
in the constructor and memoised on the managers (as the connector's `bind_kv_cache_manager`
would find it), is handed to the double's `break_` to break one rule. Built on first use,
never at collection (it imports vLLM)."""

import functools


@functools.cache
def broken_manager() -> type:
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")
    coordinator_of = load_attribute("vllm.v1.hisparse.coordinator:get_hisparse_coordinator")

    class Broken(KVCacheManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.break_(coordinator_of(self))

    return Broken
