"""`PureSWARadixCache`'s window before SGLang 0.5.23 (entry `sglang.radix.pure_swa.window`, no
SGLang needed): the window cursor read where the release keeps it (0.5.20: the field
`kv.swa_evicted_seqlen`), a cache without `evict_sliding_windows` (0.5.20) slid as its
scheduler did (only once the window moved past the cursor, then `free_swa_out_of_window_slots`),
the floor cutting only a finish under the old calls (a chunk's `cache_unfinished_req` is
RadixCache's), and no draft probe where `CacheInitParams` has no `draft_swa_window`. Each check
beside a deliberately broken variant it catches."""

import sys
from collections import Counter
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


def test_under_the_old_calls_a_decoding_requests_checkpoint_is_not_made():
    from kvfuzz.fuzz.radix.window import NO_CALL, WindowLockstep
    from kvfuzz.strategies.radix.trace import Checkpoint

    def calls(contract, judge_class=WindowLockstep):
        judge = object.__new__(judge_class)
        judge.options, judge.events = {"contract": contract}, Counter()
        judge.model = judge.build_model(SimpleNamespace(page_size=1, size=16, policy="lru",
                                                        events=False, swa_window=2))
        judge.model.admit_match(1, [1, 2, 3, 4, 5, 6], 3, 0, 0)
        judge.model.grant(1, [1, 2, 3, 4])  # past its prompt of 3: decoding
        made = [call.method for call in judge.checkpoint(Checkpoint(1))]
        return made, judge.events[NO_CALL]

    assert calls(Contract(legacy=True)) == ([], 1)  # 0.5.21's scheduler never makes it
    assert calls(CURRENT) == (["checkpoint"], 0)  # 0.5.23's checkpoint: made

    from kvfuzz.fuzz.engine.lockstep import handles
    from kvfuzz.fuzz.radix.lockstep import RadixLockstep

    class MadeAlways(WindowLockstep):  # broken: the judge as it was
        @handles(Checkpoint)
        def checkpoint(self, op):
            return (yield from RadixLockstep.checkpoint(self, op))

    assert calls(Contract(legacy=True), MadeAlways)[0] == ["checkpoint"]


def test_0_5_20s_release_of_a_finish_not_cached_is_its_cache_finished_req():
    from kvfuzz.impl.radix.legacy import LegacyCalls

    class Cache0520:  # 0.5.18-0.5.20: release_kv_cache always calls cache_finished_req
        def __init__(self):
            self.calls = []

        def cache_finished_req(self, req, is_insert=True, *, kv_len_to_handle):
            self.calls.append(("cache_finished_req", is_insert, kv_len_to_handle))

        def free_kv_row(self, kv, ranges):
            self.calls.append(("free_kv_row", ranges))

        def dec_lock_ref(self, node, params=None):
            self.calls.append(("dec_lock_ref", node))

    request = SimpleNamespace(kv=KvRecord(1), filled=7, lock="node")
    cache = Cache0520()
    LegacyCalls(cache, None, None).release(request)
    assert cache.calls == [("cache_finished_req", False, 7)]  # it frees and unlocks itself

    class RowFreed(LegacyCalls):  # broken: the mapping as it was (free_kv_row, unlock)
        def release(self, request):
            kv = request.kv
            self.cache.free_kv_row(kv, [(kv.cache_protected_len, request.filled)])
            self.unlock(request.lock)

    cache = Cache0520()
    RowFreed(cache, None, None).release(request)
    assert ("cache_finished_req", False, 7) not in cache.calls  # 0.5.20's window free skipped
