"""The "unified" target: SGLang's `UnifiedRadixCache` with each of its tree cores, driven with the
released allocator in the loop over the radix target's scheduler-like traces, in lock step with
the oracle (`lockstep.py`), the Rust core against the Python core too.

    kvfuzz diff unified --cases 500 --jobs 2
    kvfuzz diff unified --impl sglang.unified.python
Each implementation gets the traces it supports (strategies/unified/profile.py), and every report
and summary says which tree core ran. A release before 0.5.22 (0.5.20, 0.5.21) is driven through
its own scheduler calls, as the radix target drives one (`release_calls`, impl/radix/legacy.py,
the oracle told their contract, oracle/radix/contract.py), the SWA and Mamba components too;
one without a tree core (0.5.11) is one line. Imports torch and SGLang only when a trace runs.
"""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.fuzz.radix.target import METHODS, release_calls, release_name, smaller_pool
from kvfuzz.fuzz.unified.lockstep import PYTHON, RUST
from kvfuzz.fuzz.unified.judges import ByComponents
from kvfuzz.impl.registry import ImplementationError, check_shape
from kvfuzz.impl.unified import DECLARABLE, IMPLEMENTATIONS
from kvfuzz.strategies.unified import codec, generator, uniform
from kvfuzz.oracle.radix.contract import (BY_NAME, CHECKPOINT_REMATCHES, LEGACY_CALLS,
                                          LIFTS_SWA_CURSOR,
                                          NO_CHECKPOINT_WINDOW_FREE, NO_FULL_DONOR,
                                          SWA_PAGE_MARGIN, contract_of)
from kvfuzz.strategies.unified.profile import (KEEPS_KEY, KEEPS_MAMBA_VALUE, broken, core_of,
                                              donor_of, host_of, mamba_of, swa_of, unsupported)
from kvfuzz.strategies.unified.trace import CREATES, FORMAT, describe_op, to_json


# What an outside class of the scheduler's calls before 0.5.22 must have (`release_calls` reads
# the rest from it; 0.5.11's has no tree core, `evict_for_alloc` or `root_node_handle`).
OLD_METHODS = ("match_prefix", "insert", "evict", "inc_lock_ref", "dec_lock_ref",
               "cache_unfinished_req", "reset", "evictable_size", "protected_size")


def _shape(path, obj):
    """Today's interface, or, for a class of the calls before 0.5.22 (a subclass or mutant of
    an old release's), that release's (`OLD_METHODS`)."""
    from kvfuzz.impl.radix.legacy import contract_names  # no torch, no SGLang

    methods = METHODS + ("evict_for_alloc", "inc_lock_ref", "on_release", "claim_kv_row",
                         "root_node_handle")
    if isinstance(obj, type) and contract_names(obj):
        methods = OLD_METHODS
    check_shape(path, obj, 1, "a class with SGLang UnifiedRadixCache's interface "
                              "(CacheInitParams)", cls=True, methods=methods)


def scheduler_calls(impl, obj):
    """Today's calls, or those of a release before 0.5.22 read from the class as the radix target
    reads them (one line where it has neither), for every component: the SWA judge drives a
    finish as the release's own call (`swa_lockstep.py`), and the Mamba traces hold tree ops
    alone, whose old calls (a touch as `match_prefix`, a pin's `inc_lock_ref`/`dec_lock_ref`) the
    driver maps. With SWA, where the release's window free lifts the request's cursor before
    its interval check (0.5.20), the oracle is told (`LIFTS_SWA_CURSOR`), and where it keeps a
    page past the window (0.5.14), that too (`SWA_PAGE_MARGIN`), and where its checkpoint
    frees no window at all (before 0.5.18 by default), that (`NO_CHECKPOINT_WINDOW_FREE`). A
    class of the old calls without `root_node_handle` has no tree core (0.5.11's): `own_nodes`."""
    from kvfuzz.impl.unified.backend import rust_core_absent  # no torch, no SGLang
    from kvfuzz.impl.unified.node_tree import has_own_nodes
    from kvfuzz.impl.unified.release_window import (frees_window_at_checkpoint,
                                                    keeps_page_margin, lifts_swa_cursor)

    if core_of(impl.preconditions) == "rust" and not has_own_nodes(obj):
        absent = rust_core_absent()  # 0.5.17, 0.5.18: no Rust core to build at all
        if absent:
            raise ImplementationError(f"not supported: {release_name(impl)}: "
                                      f"{getattr(obj, '__name__', impl.path)}: {absent}")
    if donor_of(impl.preconditions):
        no_memory_pool(impl)
    if core_of(impl.preconditions) == "rust" and not has_own_nodes(obj):
        no_rust_reads(impl)
    impl = release_calls(impl, obj)
    if LEGACY_CALLS not in impl.preconditions and rematches_at_checkpoint(obj):
        impl = replace(impl, preconditions=impl.preconditions + (CHECKPOINT_REMATCHES,))
    if donor_of(impl.preconditions) and LEGACY_CALLS in impl.preconditions and \
            not has_full_donor(obj):
        impl = replace(impl, preconditions=impl.preconditions + (NO_FULL_DONOR,))
    if LEGACY_CALLS in impl.preconditions and has_own_nodes(obj):
        impl = own_nodes(impl, obj)
    if LEGACY_CALLS in impl.preconditions and swa_of(impl.preconditions):
        told = (LIFTS_SWA_CURSOR,) if lifts_swa_cursor() else ()
        told += (SWA_PAGE_MARGIN,) if keeps_page_margin() else ()
        told += () if frees_window_at_checkpoint() else (NO_CHECKPOINT_WINDOW_FREE,)
        impl = replace(impl, preconditions=tuple(dict.fromkeys(impl.preconditions + told)))
    return impl


# Where the Full donor lives: the unified memory pool's `init_unified_mamba_pools` builds the
# allocator whose Mamba side evicts Full leaves (impl/unified/mamba.py:unified_pools).
MEMORY_POOL = "sglang.srt.mem_cache.unified_memory_pool"


def no_memory_pool(impl) -> None:
    """An entry on the unified memory pool is one line on a release without that module (before
    0.5.15): the Full donor it judges does not exist there."""
    from kvfuzz.impl.registry import module_exists

    if impl.requires == "sglang" and not module_exists(MEMORY_POOL):
        raise ImplementationError(
            f"not supported: {release_name(impl)} has no module {MEMORY_POOL} (no unified "
            f"memory pool: the Full donor of a Mamba state does not exist there; the "
            f"sglang.unified.mamba entries run)")


RUST_ADAPTER = "sglang.srt.mem_cache.rust_tree_core.adapter"
PATH_READS = ("def collect_path_info", "def match_full_device_prefix")


def no_rust_reads(impl) -> None:
    """A Rust entry is one line where the release's Rust tree core has no read-only path read
    (0.5.19: its adapter has neither `collect_path_info` nor `match_full_device_prefix`, and
    `node_by_id` raises): a node's parent, and the nodes a split makes, cannot be read there
    without a match that stamps the tree. Read from the adapter's source file, nothing
    imported; a release without the adapter (0.5.17, 0.5.18: no Rust core) is another line's."""
    import importlib.util

    from kvfuzz.impl.registry import module_exists

    if impl.requires != "sglang" or not module_exists(RUST_ADAPTER):
        return
    try:
        with open(importlib.util.find_spec(RUST_ADAPTER).origin, encoding="utf-8") as source:
            text = source.read()
    except (OSError, TypeError, AttributeError):
        return  # nothing to read: tried as it is
    if not any(name in text for name in PATH_READS):
        raise ImplementationError(
            f"not supported: {release_name(impl)}: its Rust tree core has no read-only path "
            f"read (neither collect_path_info nor match_full_device_prefix, and node_by_id "
            f"raises), so a node's parent cannot be read without a match that stamps the tree "
            f"(the .python entries run)")


def rematches_at_checkpoint(cls) -> bool:
    """Whether the class's checkpoint matches the key again after its insert (SGLang 0.5.22:
    `checkpoint_into_tree` calls `_match_tree`; 0.5.23 takes the insert's node): read from the
    method's code names."""
    method = getattr(cls, "checkpoint_into_tree", None)
    return "_match_tree" in getattr(getattr(method, "__code__", None), "co_names", ())


def has_full_donor(cls) -> bool:
    """Whether the cache's eviction asks the allocator for a Full donor (0.5.20 on: its module
    names `mamba_full_cache_donor`), read from the source of the class's module."""
    import inspect
    import sys

    try:
        return "mamba_full_cache_donor" in inspect.getsource(sys.modules[cls.__module__])
    except (KeyError, OSError, TypeError):
        return True  # nothing to read: today's contract


def own_nodes(impl, obj):
    """SGLang 0.5.11's class keeps its tree in nodes of its own, read as they are
    (impl/unified/node_tree.py), the oracle told what the class promises (read from its
    sources); an entry that asks for the Rust core is one line: there is no core to ask for."""
    from kvfuzz.impl.unified.node_tree import contract_names  # no torch, no SGLang

    if core_of(impl.preconditions) == "rust":
        raise ImplementationError(
            f"not supported: {release_name(impl)}: {getattr(obj, '__name__', impl.path)} has no "
            f"tree core, Rust or Python (its tree is nodes of its own: the .python entries "
            f"read them)")
    return replace(impl, preconditions=tuple(dict.fromkeys(
        impl.preconditions + tuple(BY_NAME[name] for name in contract_names(obj)))))


def _generator_for(impls):
    return generator.generator_for(frozenset().union(*(unsupported(impl.preconditions)
                                                       for impl in impls)),
                                   swa=any(swa_of(impl.preconditions) for impl in impls),
                                   mamba=any(mamba_of(impl.preconditions) for impl in impls),
                                   host=any(host_of(impl.preconditions) for impl in impls))


def _broken(item, preconditions) -> list:
    """The radix profile's, and a host-tier trace ("full+host") on an entry not built with the
    host tier: its judge drives HiCache's calls the entry's cache does not have."""
    if getattr(item, "host_size", 0) and not host_of(preconditions):
        return ["a trace for a cache with HiCache's host tier (host_size), and this entry is "
                "not built with one"]
    return broken(item, preconditions)


def _options(impl) -> dict:
    return {"poison_keys": KEEPS_KEY not in impl.preconditions,
            "core": core_of(impl.preconditions),
            "poison_mamba": KEEPS_MAMBA_VALUE not in impl.preconditions,
            "contract": contract_of(impl.preconditions),
            "donor": donor_of(impl.preconditions)}


UNIFIED = trace_target(
    "unified",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "cache",
                     max_ops=codec.MAX_OPS),
    inputs=TraceInputs(generator.GENERATOR, _generator_for, uniform.uniform_trace),
    judge=LockstepJudge(ByComponents, describe_op, _broken, _options,
                        variants=("tree core", (("rust", RUST), ("python", PYTHON)))),
    catalogue=Catalogue("unified", IMPLEMENTATIONS, _shape, scheduler_calls,
                        declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), item.size, item.events), CREATES,
                           smaller_pool),
    coverage_modules=("kvfuzz.fuzz.unified.lockstep", "kvfuzz.fuzz.unified.host_lockstep",
                      "kvfuzz.oracle.unified.host", "kvfuzz.fuzz.unified.swa_lockstep",
                      "kvfuzz.fuzz.unified.swa_state", "kvfuzz.oracle.unified.swa",
                      "kvfuzz.fuzz.unified.mamba_lockstep", "kvfuzz.oracle.unified.mamba",
                      "kvfuzz.fuzz.radix.lockstep", "kvfuzz.oracle.unified.tree",
                      "kvfuzz.oracle.radix.tree", "kvfuzz.oracle.radix.model"),
    warm_up="kvfuzz.impl.unified.driver:warm_up",
    default_cases=50)
