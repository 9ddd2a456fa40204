"""`UnifiedRadixCache` of SGLang 0.5.11, whose tree is nodes of its own (no tree core): the reader
that reads those nodes through a core's read calls (impl/unified/node_tree.py), what the class
promises read from its sources (`contract_names`), and the oracle following it
(oracle/radix/contract.py: one LRU order, no hit counts, no lock delta, no KV events). Each
check beside a deliberately broken variant it catches. The release itself:
test_own_nodes_release.py (slow)."""

import importlib.util
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from kvfuzz.fuzz.unified.target import UNIFIED
from kvfuzz.impl.registry import ImplementationError
from kvfuzz.impl.unified.node_tree import NodeTree, PathInfo, contract_names
from kvfuzz.fuzz.unified.lockstep import UnifiedLockstep
from kvfuzz.oracle.radix.contract import (LEGACY_CALLS, LRU_ONLY, NO_HIT_COUNTS, NO_KV_EVENTS,
                                          NO_LOCK_DELTA, Contract, contract_of)
from kvfuzz.oracle.unified.model import UnifiedModel

FULL = 0


class Key(list):
    """0.5.11's `RadixKey` as the reader uses it: page 1, no namespace."""

    def child_key(self, page_size):
        return self[0]

    def match(self, other, page_size):
        n = 0
        while n < min(len(self), len(other)) and self[n] == other[n]:
            n += 1
        return n

    def __getitem__(self, index):
        got = list.__getitem__(self, index)
        return Key(got) if isinstance(index, slice) else got


class Node:
    def __init__(self, id, key, slots, parent=None, lock=0):
        self.id, self.key, self.parent, self.children = id, Key(key), parent, {}
        value = [] if parent is None else torch.tensor(slots, dtype=torch.int64)
        self.component_data = [SimpleNamespace(value=value, lock_ref=lock)]
        if parent is not None:
            parent.children[self.key[0]] = self


def tree():
    """root -> [1 2] (locked) -> [3] and [4 5]; slots 10.. ."""
    root = Node(0, [], None, lock=1)
    upper = Node(7, [1, 2], [10, 11], root, lock=1)
    Node(8, [3], [12], upper, lock=1)
    Node(9, [4, 5], [13, 14], upper)
    return SimpleNamespace(root_node=root, page_size=1), upper


def test_the_nodes_are_read_through_a_cores_read_calls():
    cache, upper = tree()
    nodes = NodeTree(cache, FULL)
    assert nodes.root_node_handle() == 0 and nodes.handle(upper) == 7 and nodes.handle(7) == 7
    assert nodes.collect_path_info([9]) == [[PathInfo(7, 0, 0, 2, 2), PathInfo(9, 7, 2, 4, 0)]]
    assert nodes.collect_full_device_indices(9).tolist() == [10, 11, 13, 14]
    # the read-only walk: whole nodes only, nothing split ([1 2 4] ends inside [4 5])
    assert nodes.match_full_device_prefix(Key([1, 2, 4])) == (2, 7, 2)
    assert list(upper.children[4].key) == [4, 5]
    walk = nodes.walk_for_kv_canary(False)
    rows = sorted(zip(*(column.tolist() for column in walk)))
    assert rows == [(10, 0, -1), (11, 1, 10), (12, 2, 11), (13, 2, 11), (14, 3, 13)]
    assert sorted(nodes.walk_for_kv_canary(True).slot_indices.tolist()) == [13, 14]
    with pytest.raises(KeyError):  # gone: as a core's lookup says it
        nodes.collect_path_info([5])
    cache.root_node = Node(0, [], None, lock=1)  # a reset: a new root, the old nodes gone
    with pytest.raises(KeyError):
        nodes.node_by_id(9)

    class LocksIgnored(NodeTree):  # broken: the unlocked walk as the whole walk
        def walk_for_kv_canary(self, unlocked_only, swa_resident_only=False):
            return super().walk_for_kv_canary(False)

    cache, _ = tree()
    assert len(LocksIgnored(cache, FULL).walk_for_kv_canary(True).slot_indices) == 5


SOURCE_0511 = '''
class BasePrefixCache:
    def take_events(self):
        return []


class FullComponent:
    def acquire_component_lock(self, node, result):
        node.lock_ref += 1
        return result


class MambaComponent:
    def finalize_match_result(self, aligned_seqlen):
        branching_seqlen = aligned_seqlen if aligned_seqlen > 0 else None
        return branching_seqlen


COMPONENT_REGISTRY = {0: FullComponent, 1: MambaComponent}


class UnifiedRadixCache(BasePrefixCache):
    def __init__(self, params):
        self.lru_lists = {}
'''
# a class that reads the policy, counts hits, publishes events, answers a delta and names a
# Mamba branching point past the match alone
SOURCE_LATER = SOURCE_0511.replace("aligned_seqlen > 0", "aligned_seqlen > boundary").replace("self.lru_lists = {}", "self.policy = params.eviction_policy"
                                   "\n        node.hit_count += 1").replace(
    "return result", "result.delta = 1\n        return result").replace(
    "class UnifiedRadixCache(BasePrefixCache):", "class UnifiedRadixCache(BasePrefixCache):\n"
    "    def take_events(self):\n        return ['event']\n")


def load(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.UnifiedRadixCache


def test_what_the_class_promises_is_read_from_its_sources(tmp_path, monkeypatch):
    old = load(tmp_path, "kvfuzz_test_unified_0511", SOURCE_0511)
    assert contract_names(old) == ("lru_only", "no_hit_counts", "no_kv_events", "no_lock_delta",
                                   "branches_before_match")
    later = load(tmp_path, "kvfuzz_test_unified_later", SOURCE_LATER)
    assert contract_names(later) == ()
    # the catalogue: the Python entry gets them as preconditions, the oracle follows them
    old.inc_lock_ref = old.dec_lock_ref = old.cache_unfinished_req = \
        old.match_prefix = old.cache_finished_req = lambda *args: None
    python = UNIFIED.catalogue.declare(UNIFIED.catalogue.resolve("sglang.unified.python"), old)
    assert {LRU_ONLY, NO_HIT_COUNTS, NO_KV_EVENTS, NO_LOCK_DELTA} <= set(python.preconditions)
    contract = UNIFIED.judge.options(python)["contract"]
    assert contract.lru_only and not (contract.counts_hits or contract.kv_events or
                                      contract.lock_delta)
    with pytest.raises(ImplementationError, match="has no tree core"):  # no Rust core to ask
        UNIFIED.catalogue.declare(UNIFIED.catalogue.resolve("sglang.unified.rust"), old)
    # the SWA entry runs on its nodes too (its window contract: test_legacy.py)
    swa = UNIFIED.catalogue.declare(UNIFIED.catalogue.resolve("sglang.unified.swa.python"), old)
    assert {LRU_ONLY, NO_HIT_COUNTS} <= set(swa.preconditions)
    mamba = UNIFIED.catalogue.declare(UNIFIED.catalogue.resolve("sglang.unified.mamba.python"),
                                      old)
    assert LRU_ONLY in mamba.preconditions
    assert UNIFIED.judge.options(mamba)["contract"].branches_before_match
    for name in ("kvfuzz_test_unified_0511", "kvfuzz_test_unified_later"):
        monkeypatch.delitem(sys.modules, name)


# 0.5.12: a node's hit count rises in `_inc_hit_count` alone, which returns at once where
# the cache has no HiCache controller (as kvfuzz builds it)
SOURCE_0512 = SOURCE_0511.replace("        self.lru_lists = {}\n", """        self.lru_lists = {}
        self.cache_controller = None

    def _inc_hit_count(self, node, chunked=False):
        if self.cache_controller is None:
            return
        node.hit_count += 1
""")


def test_hits_raised_for_hicache_alone_are_no_hit_counts(tmp_path, monkeypatch):
    """0.5.12 diverged at its first insert ('hits expected 1, actual 0') while the reader took any
    `hit_count +=` in the module for counted hits; the same method without the HiCache gate (a
    release that counts hits) still reads as counting them."""
    gated = load(tmp_path, "kvfuzz_test_unified_0512", SOURCE_0512)
    assert "no_hit_counts" in contract_names(gated)
    ungated = load(tmp_path, "kvfuzz_test_unified_ungated", SOURCE_0512.replace(
        "        if self.cache_controller is None:\n            return\n", ""))
    assert "no_hit_counts" not in contract_names(ungated)
    for name in ("kvfuzz_test_unified_0512", "kvfuzz_test_unified_ungated"):
        monkeypatch.delitem(sys.modules, name)


def evicted_first(contract, model_class=UnifiedModel):
    """Two nodes, the older one inserted first and then used again: the first pages a 'fifo'
    cache evicts."""
    model = model_class(1, 8, "fifo", contract)
    model.insert([1, 1], 0, 0, [1, 2])
    model.insert([2, 2], 0, 0, [3, 4])
    model.match([1, 1], 0)  # [1 1] used last
    model.tree.evict(2)
    return sorted(tuple(node.key) for node in model.tree.root.children.values())


def test_the_oracle_follows_0_5_11s_contract():
    old = contract_of((LEGACY_CALLS, LRU_ONLY, NO_HIT_COUNTS, NO_LOCK_DELTA, NO_KV_EVENTS))
    assert old == Contract(legacy=True, finish_splits_prompt=False, lru_only=True,
                           counts_hits=False, kv_events=False, lock_delta=False)
    assert evicted_first(old) == [(1, 1)]  # least recently used goes, whatever the policy
    assert evicted_first(Contract(legacy=True)) == [(2, 2)]  # fifo: the first made goes

    class PolicyAsAsked(UnifiedModel):  # broken: the model as built for the policy asked
        def __init__(self, page_size, size, policy, contract):
            super().__init__(page_size, size, policy, Contract(legacy=True))
            self.contract = contract

    assert evicted_first(old, PolicyAsAsked) == [(2, 2)]
    model = UnifiedModel(1, 8, "lru", old)
    model.insert([1, 1], 0, 0, [1, 2])
    model.insert([1, 1, 2], 0, 0, [3, 4, 5])  # walks [1 1]: a hit where hits are counted
    assert [n.hits for n in model.tree.root.children.values()] == [0]
    assert model.pin([1, 1], 0) == [None, 2]  # no delta answered; the protected size is
    counted = UnifiedModel(1, 8, "lru", Contract(legacy=True))
    counted.insert([1, 1], 0, 0, [1, 2])
    counted.insert([1, 1, 2], 0, 0, [3, 4, 5])
    assert [n.hits for n in counted.tree.root.children.values()] == [2]  # made, walked
    assert counted.pin([1, 1], 0) == [2, 2]


def test_the_judge_expects_no_kv_events_of_a_class_that_publishes_none():
    def judge(contract):
        made = object.__new__(UnifiedLockstep)
        made.options = {"contract": contract}
        made.build_model(SimpleNamespace(page_size=1, size=8, policy="lru", events=True))
        return made

    silent = judge(contract_of((LEGACY_CALLS, NO_KV_EVENTS)))
    assert not silent.events_on and silent._event_problems([], []) == []
    assert silent._event_problems([("stored", [1], None, [1], 1)], []) == [
        ("events", "1 KV events published with events off")]
    assert judge(Contract(legacy=True)).events_on  # the trace's switch, as before


def test_the_mamba_grid_is_read_from_the_component_the_cache_built(monkeypatch):
    """The grid a match's `mamba_branching_seqlen` is floored to, as the judge gets it: a
    component's `mamba_checkpoint_grid` (0.5.23), or where it keeps none (0.5.11) the chunk size
    of the server arguments its own module reads (0.5.11's: max(64, page), whatever kvfuzz
    asked). The broken variant, the grid kvfuzz asks for (`mamba_chunk`), expects a branching
    point 0.5.11 never gives."""
    from kvfuzz.impl.unified.mamba import MambaCalls
    from kvfuzz.oracle.unified.mamba import branching_seqlen, checkpoint_grid, grid_problems
    from kvfuzz.strategies.unified.trace import mamba_chunk

    module = types.ModuleType("fake_0_5_11_mamba_component")
    module.get_global_server_args = lambda: SimpleNamespace(mamba_cache_chunk_size=64)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    old = type("MambaComponent", (), {"__module__": module.__name__})
    new = type("MambaComponent", (), {"mamba_checkpoint_grid": 12})

    def driver(component):
        made = MambaCalls()
        made.MAMBA, made.cache = "mamba", SimpleNamespace(components={"mamba": component})
        return made

    assert driver(old()).mamba_grid() == 64
    assert driver(new()).mamba_grid() == 12
    # a 4-token page, a full hit of 8 past no state: 0.5.11 floors 8 to its 64-token chunks
    asked, read = checkpoint_grid(mamba_chunk(4), 4), driver(old()).mamba_grid()
    assert branching_seqlen(8, 0, read) is None  # what 0.5.11 answers
    assert branching_seqlen(8, 0, asked) == 8  # the judge on the asked grid: a false divergence
    # 0.5.11 names the floored hit wherever it is past 0 (`branches_before_match`): a full hit
    # of 96 past a state at 80 branches at 64 there; the later rule (past the match) says None
    assert branching_seqlen(96, 80, 64, before_match=True) == 64
    assert branching_seqlen(96, 80, 64) is None
    assert branching_seqlen(64, 64, 64, before_match=True) is None  # the hit not past the match
    assert branching_seqlen(60, 0, 64, before_match=True) is None  # the floor at 0
    # what is read is still held to whole pages: a grid of the chunk alone on a wider page
    assert grid_problems(read, 4) == [] and grid_problems(12, 4) == []
    broken = driver(type("MambaComponent", (), {"mamba_checkpoint_grid": 6})()).mamba_grid()
    assert grid_problems(broken, 4) == [("mamba grid", "the cache's checkpoint grid is 6 tokens, "
                                         "not a whole number of 4-token pages: a branching "
                                         "point on it can fall inside a page, where no node "
                                         "ends")]


def test_an_insert_whose_result_names_no_node_is_walked():
    """0.5.15's and 0.5.16's `InsertResult` has a `last_device_node` their unified cache leaves
    None: the Mamba entry's insert never named its node, and every trace diverged at its first
    insert ('evictable_size() says 4, its unlocked nodes hold 0'). The read-only walk names it,
    as for 0.5.11's result, which has no such field."""
    from kvfuzz.impl.unified.mamba import MambaCalls

    named = []
    for result in (SimpleNamespace(prefix_len=0, last_device_node=None),  # 0.5.15, 0.5.16
                   SimpleNamespace(prefix_len=0),  # 0.5.11
                   SimpleNamespace(prefix_len=0, last_device_node=5)):  # named: as it is
        driver = SimpleNamespace(
            device="cpu", passed=[], poison_mamba=True,
            _key=lambda tokens, ns: SimpleNamespace(extra_key=None),
            _poison_key=lambda key: None, InsertParams=lambda **kw: kw,
            cache=SimpleNamespace(insert=lambda params, result=result: result),
            _seen=lambda node, tokens, extra: named.append(("seen", node)),
            _seen_by_walk=lambda tokens, extra: named.append(("walked", tuple(tokens))))
        assert MambaCalls.insert_mamba(driver, [1, 2], 0, 0, [3, 4], 1) == [0, False]
    assert named == [("walked", (1, 2)), ("walked", (1, 2)), ("seen", 5)]

    def named_if_there(result):  # broken: the check as it was, a field that is there is a node
        return "seen" if hasattr(result, "last_device_node") else "walked"

    assert named_if_there(SimpleNamespace(last_device_node=None)) == "seen"  # never walked
