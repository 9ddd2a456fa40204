"""The SWA window of `UnifiedRadixCache` before 0.5.18, read from the release and told to the SWA
judge (no SGLang: stand-ins for what the target reads): a checkpoint that frees nothing out of
the window (0.5.11-0.5.13 have no such free; 0.5.14-0.5.17 call it only where
`SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS` says so, False by default), 0.5.14's extra
page kept past the window (`drop_page_margin`), the request's cursor where releases before 0.5.16
write it (on the request), and the both-pools page check where the allocator has no
`new_pages_available` (before 0.5.14); the request's lock with its SWA mark where
`dec_lock_ref` takes the receipt as an option (before 0.5.20), and 0.5.17-0.5.19's Python core
walked on its nodes. Each beside a deliberately broken variant it catches.
The releases themselves: test_own_nodes_release.py (slow)."""

import dataclasses
import sys
from types import SimpleNamespace

from kvfuzz.fuzz.unified.target import UNIFIED
from kvfuzz.impl.radix.legacy import read_swa_cursor
from kvfuzz.impl.radix.requests import Request
from kvfuzz.impl.unified.release_window import (COMMON, frees_window_at_checkpoint,
                                                keeps_page_margin)
from kvfuzz.oracle.radix.contract import NO_CHECKPOINT_WINDOW_FREE, SWA_PAGE_MARGIN
from kvfuzz.oracle.unified.swa import checkpoint_cursor, out_of_window_cursor
from tests.unified.test_legacy import Unified0521, free_with

ENVIRON = "sglang.srt.environ"


def flag(value):
    return SimpleNamespace(get=lambda: value)


def swa_contract():
    entry = UNIFIED.catalogue.declare(UNIFIED.catalogue.resolve("sglang.unified.swa.python"),
                                      Unified0521)
    return entry.preconditions, UNIFIED.judge.options(entry)["contract"]


def test_a_checkpoint_that_frees_no_window_keeps_the_cursor(monkeypatch):
    # 0.5.14's trace (window 1, pages of 1, 3 tokens, 1 protected): the default checkpoint frees
    # nothing and the cursor stays at 0, where the free (0.5.18 on by default) lifts it to 1
    assert checkpoint_cursor(3, None, 0, 1, 1, 1, lifted=True, frees=False) == 0
    assert checkpoint_cursor(3, None, 0, 1, 1, 1, lifted=True) == 1
    # read from the release's environment: False (0.5.14-0.5.17's default) or no such switch
    # (0.5.11-0.5.13, which have no free at a checkpoint): the judge is told
    monkeypatch.setitem(sys.modules, COMMON, SimpleNamespace(
        free_swa_out_of_window_slots=free_with("sliding_window_size")))
    for envs in (SimpleNamespace(SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=flag(False)),
                 SimpleNamespace()):
        monkeypatch.setitem(sys.modules, ENVIRON, SimpleNamespace(envs=envs))
        assert not frees_window_at_checkpoint()
        preconditions, contract = swa_contract()
        assert NO_CHECKPOINT_WINDOW_FREE in preconditions
        assert not contract.checkpoint_frees_window
    # set (0.5.18 on by default, or a user's choice): the free is expected
    monkeypatch.setitem(sys.modules, ENVIRON, SimpleNamespace(envs=SimpleNamespace(
        SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=flag(True))))
    preconditions, contract = swa_contract()
    assert NO_CHECKPOINT_WINDOW_FREE not in preconditions and contract.checkpoint_frees_window
    monkeypatch.delitem(sys.modules, ENVIRON)  # no SGLang loaded: today's contract
    assert frees_window_at_checkpoint()

    def frees_always():  # broken: the reader as it was, every release freeing at a checkpoint
        return True

    monkeypatch.setattr("kvfuzz.impl.unified.release_window.frees_window_at_checkpoint",
                        frees_always)
    monkeypatch.setitem(sys.modules, ENVIRON, SimpleNamespace(envs=SimpleNamespace()))
    assert NO_CHECKPOINT_WINDOW_FREE not in swa_contract()[0]


def test_0_5_14s_window_free_keeps_a_page_past_the_window(monkeypatch):
    # pre_len 2, window 1, pages of 1: 0.5.14 keeps 2 tokens (the cursor stays at 0), 0.5.15 on 1
    assert out_of_window_cursor(2, 0, 0, 1, 1, margin=True) == 0
    assert out_of_window_cursor(2, 0, 0, 1, 1) == 1
    # pages of 4, window 4, pre_len 16: 0.5.14's threshold 8, later 12
    assert out_of_window_cursor(16, 0, 0, 4, 4, margin=True) == 8
    assert out_of_window_cursor(16, 0, 0, 4, 4) == 12
    monkeypatch.setitem(sys.modules, COMMON, SimpleNamespace(
        free_swa_out_of_window_slots=free_with("sliding_window_size", "drop_page_margin")))
    monkeypatch.setitem(sys.modules, ENVIRON, SimpleNamespace(envs=SimpleNamespace(
        SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=flag(True))))
    assert keeps_page_margin()
    preconditions, contract = swa_contract()
    assert SWA_PAGE_MARGIN in preconditions and contract.swa_page_margin
    # the environment's switch drops it; 0.5.15 on have no such parameter
    monkeypatch.setitem(sys.modules, ENVIRON, SimpleNamespace(envs=SimpleNamespace(
        SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=flag(True),
        SGLANG_OPT_SWA_EVICT_DROP_PAGE_MARGIN=flag(True))))
    assert not keeps_page_margin()
    sys.modules[COMMON].free_swa_out_of_window_slots = free_with("sliding_window_size")
    monkeypatch.setitem(sys.modules, ENVIRON, SimpleNamespace(envs=SimpleNamespace(
        SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=flag(True))))
    assert not keeps_page_margin()
    assert not swa_contract()[1].swa_page_margin


def test_the_cursor_an_old_release_writes_on_the_request_is_read(monkeypatch):
    """Before 0.5.16 the window free writes `req.swa_evicted_seqlen` (and reads
    `req.swa_evict_floor`); the driver reads `req.kv`'s."""
    request = Request(1, [1, 2, 3], 3, None, 0, row=1)
    request.swa_evicted_seqlen = 2  # as 0.5.14's free_swa_out_of_window_slots writes it
    request.kv.swa_evict_floor = 1  # as the driver sets the floor
    assert request.kv.swa_evicted_seqlen == 2 and request.swa_evict_floor == 1
    # before 0.5.14 there is no free to read the place from: the field, read through `kv`
    monkeypatch.setitem(sys.modules, COMMON, SimpleNamespace())
    driver = SimpleNamespace(cursor_by_component=None, SWA="swa")
    assert read_swa_cursor(driver, request.kv) == 2 and driver.cursor_by_component is False

    class FieldOfItsOwn(Request):  # broken: the request as it was, a field of its own (0)
        swa_evicted_seqlen = 0

    request = FieldOfItsOwn(1, [1, 2, 3], 3, None, 0, row=1)
    request.swa_evicted_seqlen = 2
    assert read_swa_cursor(driver, request.kv) == 0  # the cursor written, never read


def test_both_pools_page_check_without_new_pages_available():
    from kvfuzz.impl.unified.driver import UnifiedDriver  # torch, no SGLang

    def driver(full, swa):
        allocator = SimpleNamespace(full_available_size=lambda: full,
                                    swa_available_size=lambda: swa)
        return SimpleNamespace(allocator=allocator, page_size=4)

    assert UnifiedDriver._both_have_a_page(driver(8, 4))
    assert not UnifiedDriver._both_have_a_page(driver(8, 3))  # the SWA pool has no page
    assert not UnifiedDriver._both_have_a_page(driver(3, 8))
    later = driver(0, 0)
    later.allocator.new_pages_available = lambda full, swa: True  # 0.5.14 on: asked
    assert UnifiedDriver._both_have_a_page(later)


# -- the request's lock before 0.5.20 (impl/unified/old_locks.py) -------------------------------

@dataclasses.dataclass
class Receipt:  # `DecLockRefParams`
    swa_uuid_for_lock: int | None = None
    skip_lock_node_ids: dict = dataclasses.field(default_factory=dict)


class Cache0517:
    """0.5.17's request calls, recorded: `dec_lock_ref(node, params=None)` (the receipt an
    option), `_dec_req_lock` reading the mark off the request, `cache_unfinished_req` moving the
    lock and writing the new mark there."""

    page_size = 1

    def __init__(self):
        self.dropped = []

    def inc_lock_ref(self, node):
        return SimpleNamespace(to_dec_params=lambda: Receipt(swa_uuid_for_lock=7))

    def dec_lock_ref(self, node, params=None, skip_swa=False):
        self.dropped.append((node, params.swa_uuid_for_lock if params else None))

    def cache_unfinished_req(self, req, chunked=False):
        self.dec_lock_ref(req.last_node, Receipt(swa_uuid_for_lock=req.swa_uuid_for_lock,
                                                 skip_lock_node_ids=req.skip_lock_node_ids))
        req.last_node, req.swa_uuid_for_lock, req.skip_lock_node_ids = "key node", 9, {}
        req.kv.cache_protected_len = 2

    def match_prefix(self, params):
        pass


def test_an_old_releases_lock_keeps_its_swa_mark():
    from kvfuzz.impl.radix.legacy import LegacyCalls
    from kvfuzz.impl.unified.old_locks import UnifiedLegacyCalls

    cache = Cache0517()
    calls = UnifiedLegacyCalls(cache, None, None, lambda result: result.to_dec_params())
    request = Request(1, [1, 2, 3], 3, None, 0, row=1)
    request.lock = calls.lock("admitted")
    calls.checkpoint(request, finishing=False)  # the release reads the mark off the request
    assert cache.dropped == [("admitted", 7)]
    assert request.lock.node == "key node" and request.lock.receipt.swa_uuid_for_lock == 9
    calls.unlock(request.lock)  # the moved lock dropped with the mark the release wrote
    assert cache.dropped[-1] == ("key node", 9)
    # broken: the old calls as they were (a bare node where the receipt is an option): the
    # mark is lost, and the SWA lock walks to the root
    cache, request = Cache0517(), Request(1, [1, 2, 3], 3, None, 0, row=1)
    bare = LegacyCalls(cache, None, None)
    request.lock = bare.lock("admitted")
    request.last_node, request.swa_uuid_for_lock, request.skip_lock_node_ids = \
        "admitted", None, {}  # what the driver left on the request
    bare.checkpoint(request, finishing=False)
    bare.unlock(request.lock)
    assert cache.dropped == [("admitted", None), ("key node", None)]


def test_a_core_without_the_read_only_walk_is_walked_on_its_nodes():
    """0.5.17-0.5.19's Python core has no `match_full_device_prefix` (0.5.20 on): the driver
    crashed at its first checkpoint; its nodes are walked as 0.5.11's are."""
    from kvfuzz.impl.unified.node_tree import WalkOverCore, walkable
    from tests.unified.test_own_nodes import Key, tree

    core, upper = tree()
    core.collect_full_device_indices = lambda node, root: "its own"
    walked = walkable(core, 0)
    assert isinstance(walked, WalkOverCore)
    assert walked.match_full_device_prefix(Key([1, 2, 4])) == (2, 7, 2)
    assert walked.collect_full_device_indices(9, 0) == "its own"  # the core's own calls kept
    core.match_full_device_prefix = lambda key: "the core's"  # 0.5.20 on: its own
    assert walkable(core, 0) is core
    rust = SimpleNamespace(collect_full_device_indices=None)  # no nodes to walk: as it is
    assert walkable(rust, 0) is rust


def test_a_later_releases_receipt_is_left_as_it_is():
    """0.5.20's and 0.5.21's `DecLockRefParams` has neither field, and 0.5.21's finish
    (`insert_req`) keeps the lock with the receipt handed: rewriting it crashed their entries
    (`unexpected keyword argument 'swa_uuid_for_lock'`)."""
    from kvfuzz.impl.radix.legacy import Held
    from kvfuzz.impl.unified.old_locks import UnifiedLegacyCalls

    @dataclasses.dataclass
    class Receipt0521:
        node_ids: tuple = ()

    handed = Receipt0521((1,))

    class Cache0521(Cache0517):
        def insert_req(self, req, up_to):  # keeps the lock
            req.kv.cache_protected_len = 2

        def cache_unfinished_req(self, req, chunked=False):  # keeps the lock on the same node
            req.kv.cache_protected_len = 2

    calls = UnifiedLegacyCalls(Cache0521(), None, None, lambda result: handed)
    for finishing in (True, False):
        request = Request(1, [1, 2, 3], 3, None, 0, row=1)
        request.lock = Held("admitted", handed)
        calls.checkpoint(request, finishing)
        assert request.lock.receipt is handed
