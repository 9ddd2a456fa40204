"""The "radix" target: a prefix cache with SGLang `RadixCache`'s interface, driven with the
released allocator in the loop over scheduler-like traces, in lock step with the oracle
(`lockstep.py`).

    kvfuzz diff radix --cases 2000 --jobs 2
    kvfuzz diff radix --impl sglang.srt.mem_cache.radix_cache:RadixCache
    kvfuzz diff radix --impl sglang.radix.pure_swa.window   # the pure-SWA window's traces
Each implementation gets the traces it supports (a reset with requests in flight, which SGLang's
scheduler never does, left out where declared: strategies/radix/profile.py). Imports torch and
SGLang only when a trace runs.
"""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.fuzz.radix.window import ByWindow
from kvfuzz.impl.radix import DECLARABLE, IMPLEMENTATIONS
from kvfuzz.oracle.radix.contract import BY_NAME, contract_of
from kvfuzz.impl.registry import ImplementationError, check_shape, installed_release
from kvfuzz.strategies.radix import codec, generator, uniform, window
from kvfuzz.strategies.radix.profile import KEEPS_KEY, broken, unsupported, window_of
from kvfuzz.strategies.radix.trace import CREATES, FORMAT, describe_op, to_json

METHODS = ("match_prefix", "insert", "evict", "lock", "unlock", "checkpoint", "free_kv_row",
           "path_device_indices", "touch_prefix", "reset", "evictable_size", "protected_size",
           "take_events")


def _shape(path, obj):
    check_shape(path, obj, 1, "a class with SGLang RadixCache's interface: (CacheInitParams)",
                cls=True, methods=METHODS)


def release_name(impl) -> str:
    return f"{impl.requires} {installed_release(impl.requires) or 'this release'}"


def release_calls(impl, obj):
    """A prefix cache with the calls of SGLang before 0.5.22 is driven through them
    (impl/radix/legacy.py), the oracle told what they promise (its preconditions, read from the
    class); one without even those is one line."""
    from kvfuzz.impl.radix.legacy import contract_names, legacy_gaps  # no torch, no SGLang

    names = contract_names(obj)
    if not names:
        return impl
    missing = legacy_gaps(obj)
    if missing:
        raise ImplementationError(
            f"not supported: {release_name(impl)}: {getattr(obj, '__name__', impl.path)} has "
            f"neither lock, unlock, checkpoint (0.5.22 on) nor {', '.join(missing)} (before)")
    return replace(impl, preconditions=tuple(dict.fromkeys(
        impl.preconditions + tuple(BY_NAME[name] for name in names))))


def _generator_for(impls):
    """The stream every one of `impls` supports: the window stream ("radix-window/1") where
    one declares the pure-SWA window."""
    left_out = frozenset().union(*(unsupported(impl.preconditions) for impl in impls))
    if any(window_of(impl.preconditions) for impl in impls):
        return window.generator_for(left_out)
    return generator.generator_for(left_out)


def smaller_pool(item):
    if item.size > item.page_size:
        yield replace(item, size=item.size - item.page_size)
    if item.events:
        yield replace(item, events=False)


RADIX = trace_target(
    "radix",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "cache",
                     max_ops=codec.MAX_OPS),
    inputs=TraceInputs(generator.GENERATOR, _generator_for, uniform.uniform_trace),
    judge=LockstepJudge(ByWindow, describe_op, broken,
                        lambda impl: {"poison_keys": KEEPS_KEY not in impl.preconditions,
                                      "contract": contract_of(impl.preconditions)}),
    catalogue=Catalogue("radix", IMPLEMENTATIONS, _shape, release_calls,
                        declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), item.size, item.events), CREATES,
                           smaller_pool),
    coverage_modules=("kvfuzz.fuzz.radix.lockstep", "kvfuzz.oracle.radix.tree",
                      "kvfuzz.oracle.radix.model", "kvfuzz.fuzz.radix.window",
                      "kvfuzz.oracle.radix.window"),
    warm_up="kvfuzz.impl.radix.driver:warm_up",
    default_cases=100)  # README command 1 runs both classes: some 30 s of its job on 2 cores
