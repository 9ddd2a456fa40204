"""An upstream class is driven as the installed release has it: found where an earlier release
kept it, read for what its API lacks (which becomes preconditions, so it gets only the inputs it
can take), or refused in one line that names the release. At the pinned release nothing is read
and nothing changes. A fake engine (`fakeeng`, written into a temporary folder with its
distribution metadata) stands for an earlier release; no real one is needed."""

from __future__ import annotations

import importlib
import sys
from dataclasses import replace

import pytest

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.kvmanager.driver import asked, taken
from kvfuzz.impl.registry import (UPSTREAM, YOURS, Implementation, ImplementationError, NotThere,
                                  load_first)
from kvfuzz.strategies.allocator.profile import NO_PAGE_IDS, NO_SEGMENT, broken
from kvfuzz.strategies.allocator.trace import Finish, Truncate
from kvfuzz.strategies.blockpool import profile as blockpool_profile
from kvfuzz.strategies.blockpool.trace import Unpin
from kvfuzz.strategies.kvmanager import released

# The earlier layout: one module where the current release has a package of modules.
OLD_POOL = '''
from kvfuzz.impl.allocator.paged_allocator import PagedAllocator


class PagedPool(PagedAllocator):
    """A paged class of an earlier release: no free_page_ids, no free_segment(s)."""

    free_page_ids = free_segment = free_segments = None
'''


@pytest.fixture
def fakeeng(tmp_path, monkeypatch):
    """`fakeeng` 1.0: `fakeeng.mem.allocator` is a module (the earlier layout)."""
    (tmp_path / "fakeeng" / "mem").mkdir(parents=True)
    (tmp_path / "fakeeng" / "__init__.py").write_text("")
    (tmp_path / "fakeeng" / "mem" / "__init__.py").write_text("")
    (tmp_path / "fakeeng" / "mem" / "allocator.py").write_text(OLD_POOL)
    (tmp_path / "fakeeng-1.0.dist-info").mkdir()
    (tmp_path / "fakeeng-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakeeng\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield
    for name in [name for name in sys.modules if name.split(".")[0] == "fakeeng"]:
        del sys.modules[name]


def _entry(**options) -> Implementation:
    return Implementation("fake.paged", "allocator", "fakeeng.mem.allocator.paged:PagedPool",
                          "a released class", UPSTREAM, requires="fakeeng",
                          earlier=("fakeeng.mem.allocator:PagedPool",), **options)


def test_a_class_is_found_where_an_earlier_release_kept_it(fakeeng):
    assert load_first(_entry().paths, "fakeeng").__name__ == "PagedPool"


def test_what_a_release_does_not_have_is_one_line_naming_the_release(fakeeng):
    with pytest.raises(ImplementationError, match=r"^not supported: fakeeng 1\.0 has no Gone "
                                                   r"in fakeeng\.mem\.allocator$"):
        load_first(("fakeeng.mem.allocator.paged:Gone", "fakeeng.mem.allocator:Gone"), "fakeeng")
    with pytest.raises(ImplementationError, match=r"^not supported: fakeeng 1\.0 has no "
                                                   r"module fakeeng\.mem\.radix$"):
        load_first(("fakeeng.mem.radix:Tree",), "fakeeng")
    with pytest.raises(NotThere, match="^import path 'fakeeng.mem.radix:Tree': cannot import"):
        load_first(("fakeeng.mem.radix:Tree",))  # not a released engine's: the plain error


def test_a_release_whose_module_imports_a_package_not_installed_is_one_line(fakeeng, tmp_path):
    # a compiled package no lock holds (sgl_kernel, which SGLang 0.5.10-0.5.11 import, has a
    # stand-in for its host kernels: test_sgl_kernel_stand_in.py)
    (tmp_path / "fakeeng" / "mem" / "kernels.py").write_text("import fake_kernel_absent\n")
    with pytest.raises(ImplementationError, match=r"^not supported: fakeeng 1\.0: fakeeng\.mem"
                                                   r"\.kernels imports fake_kernel_absent, which "
                                                   r"is not installed"):
        load_first(("fakeeng.mem.kernels:Cache",), "fakeeng")
    with pytest.raises(ImplementationError, match=r"^import path 'fakeeng.mem.kernels:Cache': "
                                                   r"cannot import 'fakeeng.mem.kernels': "
                                                   r"ModuleNotFoundError"):
        load_first(("fakeeng.mem.kernels:Cache",))  # not a released engine's: the plain error


def test_a_class_in_none_of_the_places_its_releases_kept_it_names_each_place(fakeeng):
    # MultiEndedAllocator: allocator/unified_sub_pool.py from 0.5.20, multi_ended_allocator.py
    # in 0.5.15-0.5.19, neither before (impl/compaction UPSTREAM_POOLS)
    with pytest.raises(ImplementationError, match=r"^not supported: fakeeng 1\.0 has no module "
                                                   r"fakeeng\.mem\.allocator\.pool, nor "
                                                   r"fakeeng\.mem\.pool$"):
        load_first(("fakeeng.mem.allocator.pool:Pool", "fakeeng.mem.pool:Pool"), "fakeeng")


def test_an_adapters_own_refusal_of_a_release_is_its_line_unwrapped(fakeeng, tmp_path):
    # an adapter of kvfuzz's that reads the release at import and refuses it (the compaction
    # adapter: no private name it reads) says so in its own line, not inside "cannot import"
    (tmp_path / "fakeeng" / "mem" / "adapter.py").write_text(
        "from kvfuzz.impl.registry import ImplementationError\n"
        "raise ImplementationError('not supported: fakeeng 1.0: Pool has no _flush')\n")
    with pytest.raises(ImplementationError, match=r"^not supported: fakeeng 1\.0: Pool has no "
                                                   r"_flush$"):
        load_first(("fakeeng.mem.adapter:make",), "fakeeng")


def test_an_earlier_releases_class_declares_what_it_lacks_and_gets_only_what_it_has(fakeeng):
    catalogue = TARGETS["allocator"].catalogue
    entry = _entry(preconditions=TARGETS["allocator"].catalogue.resolve(
        "sglang.paged").preconditions)
    impl = Catalogue("allocator", (entry,), catalogue.shape, catalogue.declare).as_installed(entry)
    assert {NO_PAGE_IDS, NO_SEGMENT} <= set(impl.preconditions)
    target = TARGETS["allocator"]
    traces = [target.generator.generate(0, index, [impl]) for index in range(20)]
    assert traces[0].origin.generator.endswith(",no-page-ids,no-segment]")
    hows = {op.how for trace in traces for op in trace.ops if isinstance(op, (Finish, Truncate))}
    assert hows == {"free"}
    today = target.generator.generate(0, 0, [entry])  # the current release's stream
    assert "releases by a call the class does not have: page_ids, segment" in \
        broken(today, impl.preconditions)  # (and the misuse of a free_segment it lacks)
    assert target.check(traces[0], impl).status == "agree"  # ran, on the calls it has


def test_at_the_pinned_release_an_entry_is_taken_as_written():
    for name in ("allocator", "blockpool", "kvmanager", "mamba", "swa"):
        catalogue = TARGETS[name].catalogue
        for entry in catalogue.implementations:
            if entry.kind == UPSTREAM and entry.available():
                assert catalogue.as_installed(entry) is entry  # nothing imported or read


def test_a_pool_without_unpin_blocks_gets_no_unpins():
    target = TARGETS["blockpool"]
    lacking = replace(target.catalogue.resolve("vllm.blockpool"),
                      preconditions=(blockpool_profile.NO_UNPIN,))
    declared = target.catalogue.declare(lacking, object)  # what `object` lacks: stated once
    assert declared.preconditions.count(blockpool_profile.NO_UNPIN) == 1
    traces = [target.generator.generate(0, index, [lacking]) for index in range(40)]
    assert not any(isinstance(op, Unpin) for trace in traces for op in trace.ops)
    usual = [target.generator.generate(0, index) for index in range(40)]
    with_unpins = [trace for trace in usual if any(isinstance(op, Unpin) for op in trace.ops)]
    assert with_unpins and target.check(with_unpins[0], lacking).status == "outside contract"


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


@pytest.mark.slow  # imports transformers
def test_an_earlier_sglangs_config_names_do_not_stop_its_import():
    pytest.importorskip("transformers")
    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from kvfuzz.impl.upstream_env import registrations_tolerated

    class Bert(PretrainedConfig):
        model_type = "bert"

    with pytest.raises(ValueError, match="already used by a Transformers config"):
        CONFIG_MAPPING.register("bert", Bert)
    with registrations_tolerated():
        CONFIG_MAPPING.register("bert", Bert)  # as SGLang 0.5.19 registers qwen3_asr
    with pytest.raises(ValueError, match="already used"):
        CONFIG_MAPPING.register("bert", Bert)


def test_a_release_that_cannot_drive_an_entry_leaves_it_out_of_the_defaults_and_says_why(
        fakeeng):
    target = TARGETS["allocator"]
    gone = replace(_entry(), name="fake.gone", path="fakeeng.mem.allocator.paged:Gone",
                   earlier=("fakeeng.mem.allocator:Gone",))
    catalogue = Catalogue("allocator", (_entry(), gone), target.catalogue.shape,
                          target.catalogue.declare)
    assert [impl.name for impl in catalogue.defaults(upstream=True)] == ["fake.paged"]
    assert catalogue.unsupported() == [
        ("fake.gone", "not supported: fakeeng 1.0 has no Gone in fakeeng.mem.allocator")]
    with pytest.raises(ImplementationError, match="^not supported: fakeeng 1.0 has no Gone"):
        catalogue.resolve("fake.gone")


def test_a_pool_without_is_block_writable_is_read_without_that_check():
    # vLLM before 0.29 has no `BlockPool.is_block_writable`: the reader leaves that one view out
    # (None, which `pool_state` does not compare) instead of failing every trace on it.
    from types import SimpleNamespace

    from kvfuzz.impl.blockpool.driver import PoolReader

    blocks = [SimpleNamespace(block_id=i) for i in range(3)]
    old = PoolReader(SimpleNamespace(blocks=blocks), 3)
    assert old.writable() is None
    new = PoolReader(SimpleNamespace(blocks=blocks, is_block_writable=lambda b: b.block_id > 0),
                     3)
    assert new.writable() == [1, 2]


def test_blocks_that_keep_no_token_count_are_read_without_that_check():
    # vLLM 0.20's KVCacheBlock has no `block_hash_num_tokens` (an entry covers its whole block):
    # every manager trace crashed in the reader. The count is None and left out; where the
    # blocks keep it, a wrong count is still caught.
    from types import SimpleNamespace

    from kvfuzz.fuzz.blockpool.pool_state import _per_block
    from kvfuzz.impl.blockpool.driver import PoolReader

    class Old:
        def __init__(self, i):
            self.block_id, self.ref_cnt = i, 0

    class New(Old):
        block_hash_num_tokens = 4

    def reader(kind):
        blocks = [kind(i) for i in range(3)]
        return PoolReader(SimpleNamespace(blocks=blocks, null_block=blocks[0]), 3)

    assert reader(Old).hash_tokens() is None and reader(New).hash_tokens() == [4, 4, 4]
    # (no block holds a second entry: each block's entry is its primary key, `key`)
    model = SimpleNamespace(ref=[0, 0, 0], size=3, tokens=[4, 4, 4], entries=lambda b: None,
                            extra=[[], [], []], key=[None] * 3, writable=lambda: [])
    assert _per_block(model, [0, 0, 0], [None] * 3, None, None) == []
    assert _per_block(model, [0, 0, 0], [None] * 3, [4, 4, 4], None) == []
    wrong, = _per_block(model, [0, 0, 0], [None] * 3, [4, 3, 4], None)  # a wrong count: caught
    assert wrong[0] == "block hash tokens" and "block 1's entry" in wrong[1]


def _module_of(name: str, source: str):
    """A module `name` made of `source`, registered in sys.modules (the declare step reads a
    class's module there)."""
    import types
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    sys.modules[name] = module
    return module


SWA_RELEASE = '''
def alloc_extend_kernel(*args): pass
def alloc_extend_naive(*args): pass


class PagedTokenToKVPoolAllocator:
    def alloc_extend(self, *args):
        {body}

    def alloc_decode(self, *args):
        pass


class SWATokenToKVPoolAllocator:
    def free(self): pass
    def free_full(self): pass
    def free_swa(self): pass
    def alloc_extend_swa_tail(self): pass
    def free_swa_segment(self): pass
    def free_full_segment(self): pass
    def free_segment(self): pass
    def evict_to_free_tokens(self): pass
    def reclaim_for_prealloc(self): pass
    def resize(self): pass
    def get_cpu_copy(self): pass
    def load_cpu_copy(self): pass
'''


@pytest.mark.parametrize("body, pow2", [
    ("alloc_extend_kernel(*args)", True),  # SGLang before 0.5.22: the kernel, always
    ("(alloc_extend_kernel if args else alloc_extend_naive)(*args)", False),  # 0.5.22 on
])
def test_an_swa_class_whose_paged_pools_launch_the_kernels_gets_power_of_two_pages(
        body, pow2, monkeypatch):
    from kvfuzz.strategies.swa.profile import POW2_PAGES

    monkeypatch.delitem(sys.modules, "fakeswa", raising=False)
    module = _module_of("fakeswa", SWA_RELEASE.format(body=body))
    target = TARGETS["swa"]
    entry = target.catalogue.resolve("sglang.swa")
    declared = target.catalogue.declare(entry, module.SWATokenToKVPoolAllocator)
    assert (POW2_PAGES in declared.preconditions) is pow2
    traces = [target.generator.generate(0, index, [declared]) for index in range(60)]
    sizes = {trace.page_size for trace in traces}
    assert (3 in sizes) is not pow2  # the usual stream has page size 3 in 60 traces
    if pow2:
        assert traces[0].origin.generator.endswith(",pow2]")
        usual = next(trace for trace in (target.generator.generate(0, index, [entry])
                                         for index in range(60)) if trace.page_size == 3)
        assert target.judge.broken(usual, declared.preconditions) == [POW2_PAGES]


def test_a_radix_match_is_read_from_what_the_releases_match_result_has():
    # SGLang before 0.5.22: MatchResult has the matched slots (`device_indices`), no
    # `device_prefix_len`, and RadixCache no `path_device_indices` (the path is read up the
    # parents). A driver that read only today's fields fails here.
    from types import SimpleNamespace

    import torch

    from kvfuzz.impl.radix.driver import RadixDriver, matched_len

    root = SimpleNamespace(parent=None, value=None)
    upper = SimpleNamespace(parent=root, value=torch.tensor([7, 8]))
    lower = SimpleNamespace(parent=upper, value=torch.tensor([3]))
    old = SimpleNamespace(device_indices=torch.tensor([7, 8, 3]), last_device_node=lower)
    assert matched_len(old) == 3
    assert matched_len(SimpleNamespace(device_prefix_len=2, device_indices=None)) == 2
    driver = RadixDriver.__new__(RadixDriver)  # only its cache is read
    driver.cache = SimpleNamespace(root_node=root)
    assert driver.path(lower).tolist() == [7, 8, 3] and driver.path(root).tolist() == []
    driver.cache.path_device_indices = lambda node: torch.tensor([1])
    assert driver.path(lower).tolist() == [1]  # where the release has the call, it is asked


def test_a_unified_cache_without_todays_scheduler_calls_or_the_old_ones_is_one_line():
    # SGLang 0.5.20 and 0.5.21 are driven through their own calls (tests/unified/test_legacy.py);
    # a class with neither today's nor those is one line, as the radix target says it
    target = TARGETS["unified"]
    entry = target.catalogue.resolve("sglang.unified.rust")

    class Old:
        def inc_lock_ref(self, node): pass
        def touch_prefix(self, key): pass

    with pytest.raises(ImplementationError, match=r"^not supported: sglang .*: Old has neither "
                                                   r"lock, unlock, checkpoint \(0\.5\.22 on\) "
                                                   r"nor dec_lock_ref, cache_unfinished_req"):
        target.catalogue.declare(entry, Old)
    assert target.catalogue.declare(entry, type("New", (Old,), {
        "lock": Old.touch_prefix, "unlock": Old.touch_prefix, "checkpoint": Old.touch_prefix,
        "free_kv_row": Old.touch_prefix})) is entry


def test_a_pool_of_an_earlier_release_gets_only_the_configurations_it_takes():
    # vLLM 0.25's BlockPool: no lookahead hashing in its constructor, no replace_existing_hashes
    # in cache_partial_block (which asserts an entry strictly inside a block), no
    # move_block_hashes or emit_cached_block_events. Read from the class; its stream makes none.
    from kvfuzz.strategies.blockpool.profile import (NO_LOOKAHEAD, NO_MOVE, NO_REPLACE,
                                                     NO_REPORT)
    from kvfuzz.strategies.blockpool.trace import CachePartial, Move

    class OldPool:
        def __init__(self, num_gpu_blocks, enable_caching, hash_block_size,
                     enable_kv_cache_events=False, metrics_collector=None):
            pass

        def cache_partial_block(self, request, block, num_tokens, kv_cache_group_id,
                                block_size):
            pass

    target = TARGETS["blockpool"]
    entry = target.catalogue.resolve("vllm.blockpool")
    old = target.catalogue.declare(entry, OldPool)
    assert {NO_LOOKAHEAD, NO_MOVE, NO_REPLACE, NO_REPORT} <= set(old.preconditions)
    assert target.catalogue.declare(entry, type("New", (OldPool,), {
        "__init__": lambda self, num_hash_lookahead_tokens=0, **rest: None,
        "cache_partial_block": lambda self, *a, replace_existing_hashes=False: None,
        "cache_full_blocks": lambda self, *a, block_mask=None: None,
        "move_block_hashes": len, "emit_cached_block_events": len, "unpin_blocks": len,
    })) == entry  # today's shape: nothing declared
    traces = [target.generator.generate(0, index, [old]) for index in range(150)]
    assert "no-replace" in traces[0].origin.generator
    partials = [(op, t) for t in traces for op in t.ops if isinstance(op, CachePartial)]
    assert partials and not any(op.replace or op.units % t.scale == 0 for op, t in partials)
    assert not any(isinstance(op, Move) for t in traces for op in t.ops)
    assert not any(t.lookahead or t.report for t in traces)
    usual = [target.generator.generate(0, index, [entry]) for index in range(150)]
    for wanted, text in ((lambda t: t.lookahead, NO_LOOKAHEAD), (lambda t: t.report, NO_REPORT),
                         (lambda t: any(isinstance(op, Move) for op in t.ops), NO_MOVE),
                         (lambda t: any(isinstance(op, CachePartial) and op.replace
                                        for op in t.ops), NO_REPLACE)):
        trace = next(t for t in usual if wanted(t))
        assert text in target.judge.broken(trace, old.preconditions)


def test_a_pool_that_joins_hash_units_or_takes_no_mask_gets_one_unit_blocks_unmasked():
    # vLLM 0.20's BlockPool: a block of several hash units keyed by the units' hashes joined
    # (its module's BlockHashListWithBlockSize; 0.25 on, by the last unit's), and
    # cache_full_blocks without block_mask. Read from the class and its module.
    import sys
    import types

    from kvfuzz.strategies.blockpool.profile import NO_MASK, NO_SCALE
    from kvfuzz.strategies.blockpool.trace import Cache

    def module_with(get):
        module = types.ModuleType("kvfuzz_test_old_pool")
        module.BlockHashListWithBlockSize = type("Scaled", (), {
            "__init__": lambda self, hashes, unit, size: setattr(self, "h", (hashes, size)),
            "__getitem__": lambda self, i: get(*self.h, i)})
        pool = type("OldPool", (), {"__module__": module.__name__,
                                    "cache_full_blocks": lambda self, request, blocks: None})
        sys.modules[module.__name__] = module
        return pool

    target = TARGETS["blockpool"]
    entry = target.catalogue.resolve("vllm.blockpool")
    try:
        joined = target.catalogue.declare(entry, module_with(
            lambda hashes, size, i: b"".join(hashes[i * size:(i + 1) * size])))
        last = target.catalogue.declare(entry, module_with(
            lambda hashes, size, i: hashes[(i + 1) * size - 1]))
    finally:
        del sys.modules["kvfuzz_test_old_pool"]
    assert NO_SCALE in joined.preconditions and NO_SCALE not in last.preconditions
    assert NO_MASK in joined.preconditions and NO_MASK in last.preconditions
    traces = [target.generator.generate(0, index, [joined]) for index in range(150)]
    assert "no-scale, no-mask" in traces[0].origin.generator
    assert all(t.scale == 1 for t in traces)
    assert not any(isinstance(op, Cache) and op.skip for t in traces for op in t.ops)
    usual = [target.generator.generate(0, index, [entry]) for index in range(150)]
    assert NO_SCALE in target.judge.broken(next(t for t in usual if t.scale > 1),
                                           joined.preconditions)
    masked = next(t for t in usual if any(isinstance(op, Cache) and op.skip for op in t.ops))
    assert NO_MASK in target.judge.broken(masked, joined.preconditions)


def test_a_managers_reads_are_made_only_where_the_class_has_them():
    # vLLM 0.25's manager has no estimate_cached_tokens; 0.26-0.29 count the common prefix
    # where 0.33's stub (which kvfuzz models) returns zeros. Read from the class: such a read is
    # left out, the others still compared.
    from types import SimpleNamespace

    from kvfuzz.fuzz.kvmanager.lockstep import KVManagerLockstep
    from kvfuzz.impl.kvmanager.driver import asks_coordinator
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
    from kvfuzz.impl.kvmanager.driver import released_api
    from kvfuzz.strategies.kvmanager.released import LACKS, NO_COMPUTED_IDS

    assert LACKS["computed_ids"] == NO_COMPUTED_IDS
    lacks = released_api.__code__.co_consts  # the name it looks up on the class
    assert "get_block_ids_for_computed_tokens" in lacks
    lock.unread = unread((NO_COMPUTED_IDS, NO_ESTIMATE, COUNTS_COMMON_PREFIX))
    assert lock._reads(1, SimpleNamespace(computed=3)) == [] and asked == []


def test_an_offloading_manager_is_built_and_read_by_the_names_its_release_has():
    # vLLM before 0.30: the constructor takes num_blocks (0.33: num_chunks), and 0.25's stats
    # have the usage gauge alone, read as the model's pinned and being-stored chunks together.
    from kvfuzz.fuzz.offload.checks import as_read, state_of
    from kvfuzz.impl.offload.release_api import pool_keyword

    class Old:
        def __init__(self, num_blocks, cache_policy="lru", enable_events=False):
            pass

    class New:
        def __init__(self, num_chunks, cache_policy="lru", enable_events=False):
            pass

    assert (pool_keyword(Old), pool_keyword(New)) == ("num_blocks", "num_chunks")
    model = {"pinned": 1, "writing": 2, "allocations": [3], "skipped": 0}
    old = state_of(([], "", [], None, [0, 0, 0], [-1, -1, 3, 0], None, []))["stats"]
    assert old == {"used": 3, "skipped": 0} and as_read(model, old) == {"used": 3, "skipped": 0}
    assert as_read(model, {**old, "used": 4}) != {**old, "used": 4}  # a wrong count still shows
    new = state_of(([], "", [], None, [0, 0, 0], [1, 2, -1, 0], [3], []))["stats"]
    assert as_read(model, new) == model == new


def test_a_managers_lookup_and_hit_alone_follow_what_the_release_declares():
    # vLLM 0.25's get_computed_blocks returns (blocks, hit): no boundary to compare; before 0.30
    # allocate_slots of a hit alone raises (0.33 adopts it): the model refuses it there too.
    from kvfuzz.impl.kvmanager.driver import returns_boundary
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


def test_an_offloading_manager_whose_policy_has_no_request_hook_gets_its_release_s_contract():
    # vLLM 0.24-0.30: the cache policies have no on_request_finished (no request ranks, a
    # recency order alone): judged by that release's contract (oracle/offload/contract.py),
    # where it was one "not supported" line (tests/offload/test_legacy_contract.py: the rest)
    from kvfuzz.fuzz.offload.target import release_contract, with_contract
    from kvfuzz.oracle.offload.contract import CURRENT, contract_of

    target = TARGETS["offload"]
    entry = target.catalogue.resolve("vllm.offload.lru")
    assert target.catalogue.declare is release_contract

    class LRUCachePolicy:  # 0.30's methods
        def touch(self, keys, req_context): pass
        def evict(self, n, protected): pass

    class CPUOffloadingManager:
        def _record_accesses(self, keys): pass

        def complete_store(self, keys, req_context, success=True):
            return "metadata_only"  # 0.33 publishes a failed store's removal

    judged = with_contract(entry, CPUOffloadingManager, LRUCachePolicy)
    assert contract_of(judged.preconditions).legacy
    later = type("LRUCachePolicy", (LRUCachePolicy,), {"on_request_finished": lambda s, r: 0,
                                                       "on_request_access": lambda s, k, r: 0})
    assert with_contract(entry, CPUOffloadingManager, later) == entry
    assert contract_of(entry.preconditions) is CURRENT
    own = replace(entry, kind=YOURS, mutates=())  # a class of one's own: as it declares
    assert release_contract(own, object) is own


def test_an_lru_policy_that_ranks_by_recency_alone_is_read_in_its_order():
    # vLLM 0.31 and 0.32's LRUCachePolicy keeps one int rank a key (recency), 0.33's a
    # (request rank, -position) pair: the state read takes either, in the policy's order (the
    # int read as 0.33 writes a key without a position, (rank, 0)), where it raised on the int.
    from types import SimpleNamespace

    from kvfuzz.impl.offload.driver import OffloadDriver, offload_key

    def view(ranks: dict):
        keys = {offload_key(key): rank for key, rank in ranks.items()}
        policy = SimpleNamespace(chunks=dict.fromkeys(keys), _ranks=keys,
                                 _evictable=set(list(keys)[:1]))
        driver = object.__new__(OffloadDriver)
        driver.manager, driver.plain = SimpleNamespace(_policy=policy), {}
        return driver.policy_view()

    recency = view({(1001, 0): 7, (1002, 0): 3, (2001, 1): 5})
    assert recency == {"order": [1002, 0, 2001, 1, 1001, 0], "evictable": [1001, 0]}
    ranked = view({(1001, 0): (2, -1), (1002, 0): (2, -3), (2001, 1): (1, 0)})
    assert ranked["order"] == [2001, 1, 1002, 0, 1001, 0]


def test_a_spec_field_an_earlier_release_lacks_makes_the_trace_outside_its_contract():
    # vLLM 0.24's SlidingWindowSpec has no extra_retained_tokens: a trace that sets it crashed
    # in the driver's constructor call; read from the signatures, it is outside the contract.
    from dataclasses import dataclass
    from types import SimpleNamespace

    from kvfuzz.impl.kvmanager.driver import CONSTRUCTOR_FIELDS, constructors_take

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

    from kvfuzz.impl.kvmanager.driver import constructors_take

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
    import kvfuzz.impl.kvmanager.driver as driver

    monkeypatch.setattr(driver, "released_api", lambda cls: {})
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
