"""SGLang's prefix caches before 0.5.22, without a wheel: the oracle's old contract on worked
examples (oracle/radix/contract.py), the calls the driver maps onto a release's own
(impl/radix/legacy.py) on fakes that record them, what the target reads from a class, and the
one line for a class it cannot drive. The real releases: test_legacy_release.py (slow)."""

from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.radix.target import RADIX
from kvfuzz.impl.radix.calls import Calls
from kvfuzz.impl.radix.legacy import LegacyCalls, calls_for, contract_names
from kvfuzz.impl.registry import ImplementationError
from kvfuzz.oracle.radix.contract import (CURRENT, FINISH_SPLITS_PROMPT, LEGACY_CALLS, Contract,
                                          contract_of)
from kvfuzz.oracle.radix.model import RadixModel

OLD = Contract(legacy=True, finish_splits_prompt=False)


def admitted(contract, tokens, prompt, priority=0, page_size=1):
    model = RadixModel(page_size, 16, "lru", contract)
    model.admit_match(1, tokens, prompt, 0, priority)
    model.admit_lock(1)
    model.grant(1, list(range(1, len(tokens) + 1)))
    return model


def by_depth(model):
    return sorted(model.tree.nodes(), key=lambda n: len(n.path()[1]))


def test_a_chunk_checkpoint_counts_no_hit_and_a_finish_counts_every_node_before_0_5_22():
    hits = {}
    for contract in (CURRENT, OLD):
        model = admitted(contract, [1, 2, 3, 4], 4)
        model.requests[1].row = model.requests[1].row[:2]  # two tokens so far
        model.checkpoint(1)  # a chunk: 0.5.22 counts its new node, chunked=True counts none
        after_chunk = [n.hits for n in by_depth(model)]
        model.grant(1, [3, 4])
        model.checkpoint(1, finishing=True)  # 0.5.22: past [1 2] only; before: every node
        hits[contract.legacy] = after_chunk, [n.hits for n in by_depth(model)]
    assert hits == {False: ([1], [1, 1]), True: ([0], [1, 1])}


def test_a_finish_before_0_5_22_keeps_the_lock_and_row_until_the_release():
    model = admitted(OLD, [1, 2, 3], 3)
    admission_node = model.requests[1].node
    assert model.checkpoint(1, finishing=True) == 3
    assert model.requests[1].node is admission_node  # no second match, no lock moved
    assert model.tree.protected_size() == 0 and model.tree.evictable_size() == 3
    model.release(1)
    assert model.free == set(range(4, 17))  # the three slots are the tree's
    current = admitted(CURRENT, [1, 2, 3], 3)
    current.checkpoint(1)
    assert current.tree.protected_size() == 3  # 0.5.22: the lock moved onto the new node


def test_the_prompt_split_at_a_finish_only_where_the_release_has_it():
    for contract, keys in ((OLD, [[1, 2, 3, 4]]), (Contract(legacy=True), [[1, 2], [3, 4]]),
                           (CURRENT, [[1, 2], [3, 4]])):
        model = admitted(contract, [1, 2, 3, 4], 2, priority=5)
        model.checkpoint(1, finishing=True)
        assert [n.key for n in by_depth(model)] == keys
    chunk = admitted(Contract(legacy=True), [1, 2, 3, 4], 2)
    chunk.checkpoint(1)  # cache_unfinished_req never split the prompt
    assert [n.key for n in by_depth(chunk)] == [[1, 2, 3, 4]]


def test_the_contract_is_carried_by_preconditions():
    assert contract_of(()) is CURRENT
    assert contract_of((LEGACY_CALLS,)) == OLD
    assert contract_of((LEGACY_CALLS, FINISH_SPLITS_PROMPT)) == Contract(legacy=True)


class Recorder:
    """A cache that records the calls made on it; `names` are the methods it has."""

    page_size = 2

    def __init__(self, names):
        self.calls = []
        for name in names:
            setattr(self, name, self._record(name))

    def _record(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            if name == "cache_unfinished_req":
                args[0].kv.cache_protected_len, args[0].last_node = 4, "new node"
        return call


def request():
    return SimpleNamespace(filled=5, lock="node", last_node="node", done_by_finish=False,
                           kv=SimpleNamespace(cache_protected_len=2, req_pool_idx=1))


def test_the_driver_maps_each_scheduler_call_onto_the_releases_own():
    today = ("lock", "unlock", "checkpoint", "touch_prefix", "free_kv_row")
    assert type(calls_for(Recorder(today), None, None)) is Calls
    cache = Recorder(("inc_lock_ref", "dec_lock_ref", "cache_unfinished_req", "match_prefix",
                      "free_kv_row"))
    cache.cache_finished_req = lambda req, is_insert=True, *, kv_len_to_handle: \
        cache.calls.append(("cache_finished_req", kv_len_to_handle) if is_insert else
                           ("cache_finished_req", kv_len_to_handle, "not inserted"))
    calls = calls_for(cache, None, None)
    assert type(calls) is LegacyCalls
    assert calls.lock("n") == "n" and cache.calls[-1][0] == "inc_lock_ref"
    chunk = request()
    assert calls.checkpoint(chunk, finishing=False) == 4 and chunk.lock == "new node"
    assert cache.calls[-1] == ("cache_unfinished_req", (chunk,), {"chunked": True})
    done = request()
    assert calls.checkpoint(done, finishing=True) == 4  # the key: 5 tokens in pages of 2
    assert cache.calls[-1] == ("cache_finished_req", 5) and done.lock is None
    calls.release(done)  # cache_finished_req freed the rest and dropped the lock
    assert cache.calls[-1] == ("cache_finished_req", 5)
    calls.release(chunk)  # a finish not cached: 0.5.18-0.5.20's release_kv_cache's call too
    assert cache.calls[-1] == ("cache_finished_req", chunk.filled, "not inserted")
    calls.touch("key", lambda key: ("params", key))
    assert cache.calls[-1] == ("match_prefix", (("params", "key"),), {})
    newer = Recorder(("inc_lock_ref", "dec_lock_ref", "cache_unfinished_req", "insert_req"))
    LegacyCalls(newer, None, None).checkpoint(request(), finishing=True)
    assert newer.calls[-1] == ("insert_req", (newer.calls[-1][1][0],), {"up_to": 5})


class Old0520:  # RadixCache 0.5.20's calls; its finish splits the prompt
    def inc_lock_ref(self, node): pass
    def dec_lock_ref(self, node): pass
    def match_prefix(self, params): pass
    def cache_unfinished_req(self, req, chunked=False): pass

    def cache_finished_req(self, req, is_insert=True, *, kv_len_to_handle):
        prompt_key = req.origin_input_ids  # noqa: F841 - read by contract_names, not run


class OldPureSwa(Old0520):  # PureSWARadixCache 0.5.20: its finish inserts the whole key
    def cache_finished_req(self, req, is_insert=True, *, kv_len_to_handle):
        pass


def test_the_target_reads_the_old_contract_from_the_class_or_says_why_not():
    assert contract_names(Old0520) == ("legacy_calls", "finish_splits_prompt")
    assert contract_names(OldPureSwa) == ("legacy_calls",)
    entry = RADIX.catalogue.resolve("sglang.radix")
    old = RADIX.catalogue.declare(entry, Old0520)
    assert {LEGACY_CALLS, FINISH_SPLITS_PROMPT} <= set(old.preconditions)
    assert RADIX.judge.options(old)["contract"] == Contract(legacy=True)
    assert RADIX.catalogue.declare(entry, OldPureSwa).preconditions[-1] == LEGACY_CALLS

    class Bare:
        def match_prefix(self, params): pass

    with pytest.raises(ImplementationError, match=r"^not supported: sglang .*: Bare has neither "
                                                   r"lock, unlock, checkpoint \(0\.5\.22 on\) nor "
                                                   r"inc_lock_ref, dec_lock_ref"):
        RADIX.catalogue.declare(entry, Bare)


def test_the_request_stand_in_answers_the_fields_older_releases_read_on_it():
    from kvfuzz.impl.radix.requests import Request  # (torch, no SGLang)

    req = Request(1, [5, 6, 7, 8], 2, None, 0, row=3)
    req.grow(3)
    req.cache_protected_len = 2  # before 0.5.20 on the request, after on req.kv
    assert (req.req_pool_idx, req.kv.cache_protected_len) == (3, 2)
    assert list(req.output_ids) == [7] and list(req.fill_ids) == [5, 6, 7]  # 0.5.11's name
    assert (req.origin_input_ids + req.output_ids).tolist() == [5, 6, 7]  # as the finish adds
    assert req.pop_committed_kv_cache() == 3  # the finish before 0.5.18
