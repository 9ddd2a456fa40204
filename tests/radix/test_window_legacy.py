"""`PureSWARadixCache`'s window before SGLang 0.5.23 (entry `sglang.radix.pure_swa.window`, no
SGLang needed): the window cursor read where the release keeps it (0.5.20: the field
`kv.swa_evicted_seqlen`), a cache without `evict_sliding_windows` (0.5.20) slid as its
scheduler did (only once the window moved past the cursor, then `free_swa_out_of_window_slots`),
the floor cutting only a finish under the old calls (a chunk's `cache_unfinished_req` is
RadixCache's), and no draft probe where `CacheInitParams` has no `draft_swa_window`. Each check
beside a deliberately broken variant it catches."""

import sys
from types import SimpleNamespace

from kvfuzz.impl.radix.requests import KvRecord
from kvfuzz.impl.radix.window import WindowDriver
from kvfuzz.oracle.radix.contract import CURRENT, Contract
from kvfuzz.oracle.radix.window import WindowModel

COMMON = "sglang.srt.mem_cache.common"


def test_the_window_cursor_is_read_where_the_release_keeps_it():
    kv = KvRecord(1)
    kv.swa_evicted_seqlen = 8  # 0.5.20 writes the field
    kv.set_evicted_seqlen("swa", 4)  # 0.5.21 on: by component
    old = SimpleNamespace(cursor_by_component=False, SWA="swa")
    new = SimpleNamespace(cursor_by_component=True, SWA="swa")
    assert WindowDriver.cursor(old, kv) == 8 and WindowDriver.cursor(new, kv) == 4

    class ByComponentAlways(WindowDriver):  # broken: the reader as it was, on every release
        def cursor(self, kv):
            return int(kv.get_evicted_seqlen(self.SWA))

    assert ByComponentAlways.cursor(old, kv) == 4  # 0.5.20's cursor missed


def test_a_release_without_evict_sliding_windows_is_slid_as_its_scheduler_did(monkeypatch):
    freed = []

    def free(req, pre_len, *, sliding_window_size, page_size, req_to_token_pool,
             token_to_kv_pool_allocator, is_chunk_cache, retain_floor):  # 0.5.20's signature
        freed.append(pre_len)
        req.kv.swa_evicted_seqlen = max(req.kv.swa_evicted_seqlen, req.kv.cache_protected_len,
                                        pre_len - sliding_window_size)

    monkeypatch.setitem(sys.modules, COMMON, SimpleNamespace(free_swa_out_of_window_slots=free))
    cache = SimpleNamespace(supports_swa=lambda: True, sliding_window_size=3, page_size=1,
                            swa_retain_floor=lambda req: None)

    def driver(cls=WindowDriver):
        made = object.__new__(cls)
        made.cache, made.window, made.rows, made.allocator = cache, 3, None, None
        made.cursor_by_component, made.SWA = False, "swa"
        request = SimpleNamespace(kv=KvRecord(1), filled=3)
        request.kv.cache_protected_len = 2
        made.requests = {1: request}
        return made, request

    made, request = driver()
    assert made.slide(1) == 0 and freed == []  # the window has not moved: no call, no lift
    request.filled = 5
    assert made.slide(1) == 2 and freed == [5]  # moved: 0.5.20's free, its cursor read back

    class CallsAlways(WindowDriver):  # broken: the free called before every decode step
        def slide(self, rid):
            self._free_out_of_window(self.requests[rid])
            return self.cursor(self.requests[rid].kv)

    made, request = driver(CallsAlways)
    assert made.slide(1) == 2  # 0.5.20's free lifts the cursor to the protected length


def test_under_the_old_calls_the_floor_cuts_only_a_finish():
    def cached(contract, finishing):
        model = WindowModel(1, 16, "lru", 2, contract)
        model.admit_match(1, [1, 2, 3, 4, 5, 6], 6, 0, 0)
        model.admit_lock(1)
        model.grant(1, [1, 2, 3, 4])
        model.set_floor(1, 2)
        return model.checkpoint(1, finishing)

    legacy = Contract(legacy=True)
    assert cached(legacy, False) == 4  # cache_unfinished_req: RadixCache's, the whole key
    assert cached(legacy, True) == 2  # cache_finished_req / insert_req: up to the floor
    assert cached(CURRENT, False) == 2  # 0.5.23's checkpoint: the floor cuts every one

    class FloorAlways(WindowModel):  # broken: the model as it was, whatever the calls
        def key_limit(self, request):
            return 2

    model = FloorAlways(1, 16, "lru", 2, legacy)
    model.admit_match(1, [1, 2, 3, 4, 5, 6], 6, 0, 0)
    model.admit_lock(1)
    model.grant(1, [1, 2, 3, 4])
    assert model.checkpoint(1, False) == 2  # a 0.5.20 chunk's 4 tokens missed
