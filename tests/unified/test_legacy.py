"""`UnifiedRadixCache` of SGLang 0.5.20 and 0.5.21 without a wheel: driven through the scheduler's
calls of its day as RadixCache is (impl/radix/legacy.py), a lock carrying the receipt its
`dec_lock_ref` takes; a node's path read without `collect_path_info` (impl/unified/paths.py);
the unified model under the old contract (a chunk matches its key again); what the unified
target reads from a class, for the SWA and Mamba profiles too (0.5.20's window free, which
lifts the SWA cursor); the SWA judge's finish through the release's own call; the SWA cursor
read where the release keeps it. Each check beside a deliberately broken variant it catches.
The release itself: test_legacy_release.py (slow)."""

import dataclasses
import sys
from collections import Counter
from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.unified.swa_lockstep import Held as Running
from kvfuzz.fuzz.unified.swa_lockstep import SWALockstep
from kvfuzz.fuzz.unified.target import UNIFIED
from kvfuzz.impl.radix.legacy import (Held, LegacyCalls, calls_for, request_lock_fields,
                                      takes_receipt)
from kvfuzz.impl.radix.requests import KvRecord
from kvfuzz.impl.registry import ImplementationError
from kvfuzz.impl.unified.release_window import COMMON, lifts_swa_cursor
from kvfuzz.impl.unified.paths import PathNodeInfo, path_info
from kvfuzz.oracle.radix.contract import (CURRENT, FINISH_SPLITS_PROMPT, LEGACY_CALLS,
                                          LIFTS_SWA_CURSOR, Contract, contract_of)
from kvfuzz.oracle.unified.model import UnifiedModel
from kvfuzz.oracle.unified.swa import checkpoint_cursor, out_of_window_cursor


class Receipt:
    def __init__(self, node):
        self.node = node

    def to_dec_params(self):
        return f"receipt of {self.node}"


class OldUnified:
    """UnifiedRadixCache 0.5.21's scheduler calls, recorded: `dec_lock_ref` takes the receipt,
    `cache_unfinished_req` releases `req.last_node` with `req.lock_receipt` and locks the key's
    node, `insert_req` keeps the lock."""

    page_size = 2

    def __init__(self):
        self.calls = []

    def inc_lock_ref(self, node_id, skip_lock_components=()):
        self.calls.append(("inc", node_id))
        return Receipt(node_id)

    def dec_lock_ref(self, node_id, params, skip_swa=False):
        self.calls.append(("dec", node_id, params))

    def match_prefix(self, params):
        pass

    def cache_unfinished_req(self, req, chunked=False, **kwargs):
        self.dec_lock_ref(req.last_node, req.lock_receipt)  # as its _dec_req_lock does
        req.last_node = "key node"
        req.lock_receipt = self.inc_lock_ref("key node").to_dec_params()
        req.kv.cache_protected_len = 4

    def insert_req(self, req, *, up_to, **kwargs):
        prompt_key = None  # noqa: F841 - its finish splits the prompt: contract_names reads it
        req.kv.cache_protected_len = up_to // 2 * 2

    def free_kv_row(self, kv, ranges):
        self.calls.append(("free_kv_row", ranges))


def admitted(calls):
    request = SimpleNamespace(filled=5, last_node="admission node", lock=None,
                              kv=SimpleNamespace(cache_protected_len=2, req_pool_idx=1))
    request.lock = calls.lock(request.last_node)
    return request


def test_a_release_whose_unlock_takes_the_receipt_gets_each_lock_with_its_receipt():
    cache = OldUnified()
    calls = calls_for(cache, None, None)
    assert type(calls) is LegacyCalls and calls.receipts
    request = admitted(calls)
    assert request.lock == Held("admission node", "receipt of admission node")
    assert calls.checkpoint(request, finishing=False) == 4
    # the chunk released the admission lock with its own receipt and moved onto the key's node
    assert cache.calls[1] == ("dec", "admission node", "receipt of admission node")
    assert request.lock == Held("key node", "receipt of key node")
    calls.checkpoint(request, finishing=True)  # insert_req keeps the lock, as 0.5.21's does
    calls.release(request)
    assert cache.calls[-2:] == [("free_kv_row", [(4, 5)]),
                                ("dec", "key node", "receipt of key node")]


def test_a_lock_not_handed_to_the_request_is_caught():
    class Forgetful(LegacyCalls):  # broken: the request's own fields never set
        def _hand_over(self, request):
            pass

    cache = OldUnified()
    request = admitted(Forgetful(cache, None, None))
    del request.last_node  # what a request whose lock was not handed over lacks
    with pytest.raises(AttributeError):
        Forgetful(cache, None, None).checkpoint(request, finishing=False)
    request = admitted(LegacyCalls(cache, None, None))
    del request.last_node
    LegacyCalls(cache, None, None).checkpoint(request, finishing=False)  # handed over: runs


def test_radix_caches_unlock_with_the_node_alone():
    class OldRadix:  # RadixCache 0.5.20: the receipt is optional, the node is the lock
        def dec_lock_ref(self, node, params=None): pass

    assert takes_receipt(OldUnified()) and not takes_receipt(OldRadix())



@dataclasses.dataclass
class Params:  # 0.5.17-0.5.19's DecLockRefParams
    swa_uuid_for_lock: object = None
    skip_lock_node_ids: dict = dataclasses.field(default_factory=dict)


class Unified0517:
    """UnifiedRadixCache 0.5.17's scheduler calls, recorded: `dec_lock_ref`'s receipt optional,
    `_dec_req_lock` builds it from the request's own fields, which `cache_unfinished_req`
    writes back after locking the key's node."""

    page_size = 2

    def __init__(self):
        self.calls, self.uuid = [], 0

    def inc_lock_ref(self, node_id, skip_lock_components=()):
        self.uuid += 1
        result = SimpleNamespace(swa_uuid_for_lock=self.uuid, skip_lock_node_ids={"swa": {self.uuid}})
        result.to_dec_params = lambda: Params(result.swa_uuid_for_lock, result.skip_lock_node_ids)
        return result

    def dec_lock_ref(self, node_id, params=None, skip_swa=False):
        self.calls.append(("dec", node_id, params, skip_swa))

    def _dec_req_lock(self, req, *, skip_swa=False):
        self.dec_lock_ref(req.last_node, Params(swa_uuid_for_lock=req.swa_uuid_for_lock,
                                                skip_lock_node_ids=req.skip_lock_node_ids),
                          skip_swa=skip_swa)

    def cache_unfinished_req(self, req, chunked=False, **kwargs):
        self._dec_req_lock(req)
        lock = self.inc_lock_ref("key node")
        req.last_node, req.swa_uuid_for_lock = "key node", lock.swa_uuid_for_lock
        req.skip_lock_node_ids = lock.skip_lock_node_ids
        req.kv.cache_protected_len = 4

    def cache_finished_req(self, req, is_insert=True, *, kv_len_to_handle):
        self._dec_req_lock(req, skip_swa=req.swa_prefix_lock_released)


def test_0_5_17s_lock_fields_are_read_from_the_class():
    assert request_lock_fields(Unified0517) == ("skip_lock_node_ids", "swa_uuid_for_lock")
    assert request_lock_fields(OldUnified) == ()  # no _dec_req_lock: it reads no request lock

    class Unified0520:
        def _dec_req_lock(self, req, *, skip_swa=False):
            self.dec_lock_ref(req.last_node, req.lock_receipt, skip_swa=skip_swa)

    assert request_lock_fields(Unified0520) == ("lock_receipt",)


def test_0_5_17s_request_carries_its_locks_receipt_fields_each_call():
    cache = Unified0517()
    calls = calls_for(cache, None, None)
    assert calls.receipts  # its params optional, but the SWA lock needs its uuid
    request = admitted(calls)
    assert request.lock == Held("admission node", Params(1, {"swa": {1}}))
    calls.checkpoint(request, finishing=False)
    # the chunk dropped the admission lock with its uuid, and the key node's came back
    assert cache.calls[0] == ("dec", "admission node", Params(1, {"swa": {1}}), False)
    assert request.lock == Held("key node", Params(2, {"swa": {2}}))
    calls.checkpoint(request, finishing=True)
    assert cache.calls[1] == ("dec", "key node", Params(2, {"swa": {2}}), False)

    class NodeOnly(LegacyCalls):  # broken: the lock as RadixCache's, its receipt never kept
        def __init__(self, cache, allocator, rows):
            super().__init__(cache, allocator, rows)
            self.receipts = False

    cache = Unified0517()
    request = admitted(NodeOnly(cache, None, None))
    request.swa_prefix_lock_released = False
    with pytest.raises(AttributeError, match="swa_uuid_for_lock"):  # 0.5.17's crash at op 5
        NodeOnly(cache, None, None).checkpoint(request, finishing=False)

    class StaleReceipt(LegacyCalls):  # broken: the receipt handed over kept after the chunk
        def _receipt_back(self, request):
            return request.lock_receipt

    cache = Unified0517()
    request = admitted(StaleReceipt(cache, None, None))
    StaleReceipt(cache, None, None).checkpoint(request, finishing=False)
    assert request.lock == Held("key node", Params(1, {"swa": {1}}))  # the admission's uuid


class Core:
    """A tree core of 0.5.20/0.5.21 with no `collect_path_info`: nodes by id, each with its
    parent, tokens and full-attention slots; `match_full_device_prefix` is its read-only walk."""

    ROOT = 0

    def __init__(self, nodes):
        self.nodes = nodes  # id -> (parent, tokens of its own key, its slots)

    def _path(self, node):
        found = []
        while node != self.ROOT:
            parent, tokens, slots = self.nodes[node]
            found.append((node, tokens, slots))
            node = parent
        return found[::-1]

    def collect_full_device_indices(self, node, until):
        return [s for _, _, slots in self._path(node) for s in slots]

    def get_component_device_value(self, node, component):
        return self.nodes[node][2]

    def match_full_device_prefix(self, key):
        tokens, _ = key
        node, matched = self.ROOT, 0
        while True:
            child = next((c for c, (p, t, _) in self.nodes.items() if p == node and
                          tokens[matched:matched + len(t)] == t), None)
            if child is None:
                return matched, node, matched
            node, matched = child, matched + len(self.nodes[child][1])


def driver_over(core):
    cache = SimpleNamespace(tree_core=core, root_node_handle=lambda: Core.ROOT)
    return SimpleNamespace(cache=cache, tree_core=core, root_handle=cache.root_node_handle,
                           FULL="full", Key=lambda tokens, extra: (list(tokens), extra))


def test_a_path_is_read_without_collect_path_info_ancestors_included():
    # [1 2] -> [3 4 5]: the upper node is one no call named (a split's, say)
    core = Core({7: (0, [1, 2], [10, 11]), 9: (7, [3, 4, 5], [12, 13, 14])})
    found = path_info(driver_over(core), 9, [1, 2, 3, 4, 5, 6], None)
    assert found == [PathNodeInfo(7, 0, 0, 2), PathNodeInfo(9, 7, 2, 5)]
    with pytest.raises(KeyError):  # gone: as collect_path_info says it
        path_info(driver_over(core), 4, [1, 2], None)
    # broken: a core whose walk finds no node ending where the node starts
    core.match_full_device_prefix = lambda key: (1, 7, 2)
    with pytest.raises(RuntimeError, match="no node of the tree ends at its start 2"):
        path_info(driver_over(core), 9, [1, 2, 3, 4, 5], None)
    # where the core has collect_path_info (0.5.22 on), it is what is read
    core.collect_path_info = lambda nodes: [["asked"]]
    assert path_info(driver_over(core), 9, [], None) == ["asked"]


def test_before_0_5_22_a_chunk_matches_its_key_again_in_the_unified_model():
    def ticks(contract, model_class=UnifiedModel):
        """The clock's ticks a chunk checkpoint takes: its insert's, and its match's."""
        model = model_class(1, 16, "lru", contract)
        model.admit_match(1, [1, 2, 3, 4], 4, 0, 0)
        model.admit_lock(1)
        model.grant(1, [1, 2, 3])
        before = model.tree.clock
        model.checkpoint(1)
        assert model.requests[1].node.access == model.tree.clock or not contract.legacy
        return model.tree.clock - before

    class NoRematch(UnifiedModel):  # broken: 0.5.23's checkpoint under the old contract
        def key_node(self, ns, key, inserted):
            return self.tree.path_value(inserted), inserted

    legacy = Contract(legacy=True)
    assert ticks(legacy) == ticks(CURRENT) + 2  # the second match's
    assert ticks(legacy, NoRematch) == ticks(CURRENT)  # what the access times then differ on


class Unified0521(OldUnified):
    def __init__(self, params):
        super().__init__()

    def root_node_handle(self):
        return 0


class Unified0511(OldUnified):
    """0.5.11's class: the old calls, but nodes of its own and no tree core (test_own_nodes.py
    reads such a tree)."""

    def __init__(self, params):
        super().__init__()


def test_the_unified_target_reads_the_old_calls_from_the_class():
    entry = UNIFIED.catalogue.resolve("sglang.unified.rust")
    old = UNIFIED.catalogue.declare(entry, Unified0521)
    assert {LEGACY_CALLS, FINISH_SPLITS_PROMPT} <= set(old.preconditions)
    assert UNIFIED.judge.options(old)["contract"] == contract_of(old.preconditions) == \
        Contract(legacy=True)
    assert UNIFIED.judge.options(entry)["contract"] is CURRENT
    # 0.5.11's (no tree core): its own nodes are read (test_own_nodes.py); no Rust core to ask
    with pytest.raises(ImplementationError, match=r"^not supported: sglang .*: Unified0511 has "
                                                  r"no tree core"):
        UNIFIED.catalogue.declare(entry, Unified0511)
    # the SWA and Mamba entries too: the same calls, the same contract (they were one line,
    # "not supported", before the SWA judge drove a release's finish through its own call)
    for name in ("sglang.unified.swa.python", "sglang.unified.mamba.rust"):
        component = UNIFIED.catalogue.declare(UNIFIED.catalogue.resolve(name), Unified0521)
        assert LEGACY_CALLS in component.preconditions
        assert UNIFIED.judge.options(component)["contract"] == Contract(legacy=True)


def finish_call(judge_class, contract):
    """The call an SWA judge makes for a cached finish: (method, args)."""
    judge = object.__new__(judge_class)
    judge.options, judge.events = {"contract": contract}, Counter()
    judge.model = judge.build_model(SimpleNamespace(page_size=4, window=8))
    judge.snap = {"swa": {"requests": {3: (4, 0, 9, [], None)}}}
    call = next(judge._checkpoint(3, Running((1,) * 9, 9, 0, filled=9), finishing=True))
    return call.method, call.args


def test_the_swa_judge_drives_a_release_finish_through_its_own_call():
    # before 0.5.22: insert_req / cache_finished_req (the driver told `finishing`), not the
    # chunk's cache_unfinished_req; 0.5.22 on: a checkpoint like any other
    assert finish_call(SWALockstep, Contract(legacy=True)) == ("checkpoint", (3, True))
    assert finish_call(SWALockstep, CURRENT) == ("checkpoint", (3,))

    class FinishAsChunk(SWALockstep):  # broken: the judge as it was, every finish a chunk
        def _checkpoint(self, rid, request, finishing=False):
            return super()._checkpoint(rid, request, False)

    assert finish_call(FinishAsChunk, Contract(legacy=True)) == ("checkpoint", (3,))


def test_0_5_20s_window_free_lifts_the_cursor_to_the_protected_length():
    # window 1, pages of 1: r filled 1 token, its match's branch at 1 (found by seeded trace 0
    # on 0.5.20): the insert up to the branch frees nothing; the second free, protected 1, has
    # nothing past the window either, and 0.5.20 lifts the cursor to 1 all the same
    assert out_of_window_cursor(0, 0, 1, 1, 1, lifted=True) == 1
    assert out_of_window_cursor(0, 0, 1, 1, 1) == 0  # 0.5.21 on: returns at its interval check
    assert checkpoint_cursor(1, 1, 0, 0, 1, 1, lifted=True) == 1
    assert checkpoint_cursor(1, 1, 0, 0, 1, 1) == 0
    # where the window has moved, the two agree
    assert out_of_window_cursor(13, 0, 4, 1, 4, lifted=True) == out_of_window_cursor(13, 0, 4,
                                                                                     1, 4) == 8


def free_with(*parameters):
    """A stand-in for a release's `free_swa_out_of_window_slots` with these keyword parameters."""
    namespace = {}
    exec(f"def free(req, pre_len, *, {', '.join(parameters)}): pass", namespace)
    return namespace["free"]


def test_the_window_free_is_read_from_the_release_and_told_to_the_swa_judge(monkeypatch):
    common = SimpleNamespace(free_swa_out_of_window_slots=free_with("sliding_window_size"))
    monkeypatch.setitem(sys.modules, COMMON, common)  # 0.5.20's: no eviction_interval
    assert lifts_swa_cursor()
    swa = UNIFIED.catalogue.declare(UNIFIED.catalogue.resolve("sglang.unified.swa.rust"),
                                    Unified0521)
    assert LIFTS_SWA_CURSOR in swa.preconditions
    assert UNIFIED.judge.options(swa)["contract"].lifts_swa_cursor
    full = UNIFIED.catalogue.declare(UNIFIED.catalogue.resolve("sglang.unified.python"),
                                     Unified0521)
    assert LIFTS_SWA_CURSOR not in full.preconditions  # no window: nothing to tell
    # 0.5.21 on: the interval checked first
    common.free_swa_out_of_window_slots = free_with("sliding_window_size", "eviction_interval")
    assert not lifts_swa_cursor()
    swa = UNIFIED.catalogue.declare(UNIFIED.catalogue.resolve("sglang.unified.swa.rust"),
                                    Unified0521)
    assert not UNIFIED.judge.options(swa)["contract"].lifts_swa_cursor
    monkeypatch.delitem(sys.modules, COMMON)  # no SGLang loaded: nothing read
    assert not lifts_swa_cursor()


def test_the_swa_cursor_is_read_where_the_release_keeps_it():
    from kvfuzz.impl.unified.driver import UnifiedDriver  # torch, no SGLang

    kv = KvRecord(1)
    kv.swa_evicted_seqlen = 8  # 0.5.20 writes the field
    kv.set_evicted_seqlen("swa", 4)  # 0.5.21 on: by component
    old = SimpleNamespace(cursor_by_component=False, SWA="swa")
    new = SimpleNamespace(cursor_by_component=True, SWA="swa")
    assert UnifiedDriver.swa_cursor(old, kv) == 8 and UnifiedDriver.swa_cursor(new, kv) == 4

    class ByComponentAlways(UnifiedDriver):  # broken: the reader as it was, on every release
        def swa_cursor(self, kv):
            return int(kv.get_evicted_seqlen(self.SWA))

    assert ByComponentAlways.swa_cursor(old, kv) == 4  # 0.5.20's cursor missed
