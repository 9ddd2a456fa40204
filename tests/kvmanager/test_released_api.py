"""vLLM's `KVCacheManager` driven as the installed release has it: the settings, reads and
constructor fields an earlier release lacks, read from its signatures and turned into
preconditions (a trace asking for one is outside that class's contract), never a crash (moved
from tests/engine/test_released_api.py). No real earlier release is needed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.kvmanager.released_api import asked, taken
from kvfuzz.strategies.kvmanager import released


def test_a_manager_trace_is_outside_a_class_that_cannot_take_its_settings():
    trace = next(trace for trace in (TARGETS["kvmanager"].generator.generate(0, index)
                                     for index in range(50)) if trace.retention is not None)
    assert released.broken(trace, (released.NO_RETENTION,)) == [
        f"a trace with a setting the class does not take: {released.NO_RETENTION}"]
    assert released.broken(trace, ()) == []


def test_a_setting_is_passed_only_where_it_is_taken():
    def old(config, max_model_len, enable_caching=True):
        pass

    def open_ended(config, **options):
        pass

    assert taken(old, watermark=0.1, enable_caching=False) == {"enable_caching": False}
    assert taken(open_ended, watermark=0.1) == {"watermark": 0.1}
    # a trace's setting: left out at its neutral value only, else the class fails on it
    assert asked(old, watermark=0.0, max_in_flight_tokens=None) == {}
    assert asked(old, watermark=0.1) == {"watermark": 0.1}


def test_a_managers_reads_are_made_only_where_the_class_has_them():
    # vLLM 0.25's manager has no estimate_cached_tokens; 0.26-0.29 count the common prefix
    # where 0.33's stub (which kvfuzz models) returns zeros. Read from the class: such a read is
    # left out, the others still compared.
    from types import SimpleNamespace

    from kvfuzz.fuzz.kvmanager.lockstep import KVManagerLockstep
    from kvfuzz.impl.kvmanager.released_api import asks_coordinator
    from kvfuzz.strategies.kvmanager.released import (COUNTS_COMMON_PREFIX, NO_ESTIMATE,
                                                      unread)

    class Counting:  # vLLM 0.29's shape
        def get_num_common_prefix_blocks(self, request_id):
            return self.coordinator.get_num_common_prefix_blocks(request_id)

    class Stub:  # vLLM 0.33's deprecated stub
        def get_num_common_prefix_blocks(self, request_id):
            return [0] * self.num_kv_cache_groups

    assert asks_coordinator(Counting.get_num_common_prefix_blocks)
    assert not asks_coordinator(Stub.get_num_common_prefix_blocks)
    asked = []
    answers = {"block_ids_for_computed_tokens": [[1]], "common_prefix_blocks": [2],
               "estimate_cached_tokens": 5}

    def read(method, rid, computed, names):  # the reads in one answer, in order
        assert method == "scheduler_reads" and names
        asked.extend(names)
        return [answers[name] for name in names]

    lock = KVManagerLockstep.__new__(KVManagerLockstep)
    lock.read, lock.trace = read, SimpleNamespace(dcp=1)  # no decode context parallelism
    lock.model = SimpleNamespace(estimate_cached_tokens=lambda rid: 5, groups=[0],
                                 block_ids_for_computed_tokens=lambda rid, computed: [[1]])
    lock.unread = unread((NO_ESTIMATE, COUNTS_COMMON_PREFIX, "something else"))
    assert lock._reads(1, SimpleNamespace(computed=3)) == []
    assert asked == ["block_ids_for_computed_tokens"]
    lock.unread = frozenset()  # today's class: every read made, the count of 2 a problem
    assert [p[0] for p in lock._reads(1, SimpleNamespace(computed=3))] == [
        "common_prefix_blocks"]
    asked.clear()  # vLLM 0.20: no get_block_ids_for_computed_tokens, read from the class
    from kvfuzz.impl.kvmanager.released_api import released_api
    from kvfuzz.strategies.kvmanager.released import LACKS, NO_COMPUTED_IDS

    assert LACKS["computed_ids"] == NO_COMPUTED_IDS
    lacks = released_api.__code__.co_consts  # the name it looks up on the class
    assert "get_block_ids_for_computed_tokens" in lacks
    lock.unread = unread((NO_COMPUTED_IDS, NO_ESTIMATE, COUNTS_COMMON_PREFIX))
    assert lock._reads(1, SimpleNamespace(computed=3)) == [] and asked == []


def test_a_managers_lookup_and_hit_alone_follow_what_the_release_declares():
    # vLLM 0.25's get_computed_blocks returns (blocks, hit): no boundary to compare; before 0.30
    # allocate_slots of a hit alone raises (0.33 adopts it): the model refuses it there too.
    from kvfuzz.impl.kvmanager.released_api import returns_boundary
    from kvfuzz.oracle.kvmanager.model import KVManagerModel, NothingToAllocate

    def old(self, request) -> "tuple[KVCacheBlocks, int]":
        pass

    def new(self, request) -> "tuple[KVCacheBlocks, int, int]":
        pass

    assert not returns_boundary(old) and returns_boundary(new)
    for adopts in (True, False):
        model = KVManagerModel(8, 2, 0, 64)
        model.adopts_hit_alone = adopts
        tokens = list(range(6))
        hashes = [hash(tuple(tokens[:i + 2])) for i in range(0, 6, 2)]
        model.allocate_slots(1, hashes, 6, 0, 6, 0, None, False, 6, 0, False, tokens, 0)
        model.free(1)
        hit = model.get_computed_blocks(hashes, 6, tokens)
        assert hit[1] == 4
        args = (2, hashes, 6, 0, 0, hit[1], hit[0], False, 6, hit[2], False, tokens, 0)
        if adopts:
            assert model.allocate_slots(*args) is not None
        else:
            with pytest.raises(NothingToAllocate):
                model.allocate_slots(*args)


def test_a_spec_field_an_earlier_release_lacks_makes_the_trace_outside_its_contract():
    # vLLM 0.24's SlidingWindowSpec has no extra_retained_tokens: a trace that sets it crashed
    # in the driver's constructor call; read from the signatures, it is outside the contract.
    from dataclasses import dataclass
    from types import SimpleNamespace

    from kvfuzz.impl.kvmanager.released_api import CONSTRUCTOR_FIELDS, constructors_take

    @dataclass
    class SlidingWindowSpec:  # 0.24's fields (no extra_retained_tokens)
        block_size: int
        sliding_window: int

    @dataclass
    class KVCacheConfig:
        num_blocks: int
        prefix_cache_retention_interval: int | None = None

    old = SimpleNamespace(SlidingWindowSpec=SlidingWindowSpec, KVCacheConfig=KVCacheConfig)
    takes = constructors_take(old)
    assert set(takes) == set(CONSTRUCTOR_FIELDS) and takes["retention"]
    assert not takes["retained"] and not takes["cross"]  # a class the module lacks: False
    lacks = tuple(released.LACKS[key] for key, ok in takes.items() if not ok)
    trace = next(trace for trace in (TARGETS["kvmanager"].generator.generate(0, index)
                                     for index in range(200)) if trace.window)
    assert released.broken(replace(trace, retained=2), lacks) == [
        f"a trace with a setting the class does not take: {released.NO_RETAINED}"]
    assert released.broken(replace(trace, retained=0), lacks) == []
    impl = replace(TARGETS["kvmanager"].catalogue.resolve("vllm.kvmanager"),
                   preconditions=lacks)
    assert TARGETS["kvmanager"].check(replace(trace, retained=2), impl).status == \
        "outside contract"


def test_a_setting_whose_fields_a_release_takes_only_in_part_is_outside_its_contract():
    # vLLM 0.29's MambaSpec takes num_prefill_checkpoint_blocks but not the
    # prefill_checkpoint_alignment passed beside it (0.30 added it): reading the first field
    # alone, a "mamba align" checkpoint trace crashed the constructor on every trace.
    from dataclasses import dataclass
    from types import SimpleNamespace

    from kvfuzz.impl.kvmanager.released_api import constructors_take

    @dataclass
    class MambaSpec:  # 0.29's checkpoint field, without the alignment
        block_size: int
        mamba_cache_mode: str = "none"
        num_prefill_checkpoint_blocks: int = 0
        num_speculative_blocks: int = 0

    @dataclass
    class MambaSpecAligned(MambaSpec):  # 0.30's
        prefill_checkpoint_alignment: int = 0

    takes = constructors_take(SimpleNamespace(MambaSpec=MambaSpec))
    assert takes["mamba_mode"] and takes["mamba_speculative"]
    assert not takes["mamba_checkpoint"]
    assert constructors_take(SimpleNamespace(MambaSpec=MambaSpecAligned))["mamba_checkpoint"]
    assert released.LACKS["mamba_checkpoint"]


def test_a_manager_whose_pool_joins_hash_units_gets_no_hash_block_below_its_block_size(
        monkeypatch):
    # vLLM 0.21-0.23: a block of several hash units is keyed by their hashes joined (a 32-byte
    # key), which crashed the state read ("an int past 64 bits"); read from the pool's module.
    from kvfuzz.fuzz.kvmanager import target as kvmanager_target

    entry = replace(TARGETS["kvmanager"].catalogue.resolve("vllm.kvmanager"), preconditions=())
    monkeypatch.setattr(kvmanager_target, "pool_joins_units", lambda: True)
    import kvfuzz.impl.kvmanager.released_api as reads

    monkeypatch.setattr(reads, "released_api", lambda cls: {})
    declared = kvmanager_target._declare(entry, object)
    assert declared.preconditions == (released.NO_UNIT_KEYS,)
    monkeypatch.setattr(kvmanager_target, "pool_joins_units", lambda: False)
    assert kvmanager_target._declare(entry, object).preconditions == ()
    trace = next(trace for trace in (TARGETS["kvmanager"].generator.generate(0, index)
                                     for index in range(200)) if trace.block_size > 1)
    units = replace(trace, hash_block_size=1)
    assert released.broken(units, declared.preconditions) == [
        f"a trace with a setting the class does not take: {released.NO_UNIT_KEYS}"]
    assert released.broken(replace(trace, hash_block_size=0), declared.preconditions) == []
