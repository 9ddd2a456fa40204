"""The "compaction" target: the unified-memory lazy-compaction allocator driven over traces, op by
op against the oracle with invariants I1-I11 (`lockstep.py`), then I12 (eager vs lazy, `i12.py`)
for a lazy implementation.

    kvfuzz diff compaction --cases 200 --jobs 2
    kvfuzz diff compaction --impl mutant.compaction.p2v_not_cleared --corpus /tmp/found
"""

from __future__ import annotations

import sys
from dataclasses import fields, replace

from kvfuzz.fuzz.compaction.lockstep import CompactionLockstep
from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.impl.compaction import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.compaction import codec, generator, uniform
from kvfuzz.strategies.compaction.trace import FORMAT, Release, Reserve, describe_op, to_json

EAGER = "compaction.eager"  # I12's reference side
# A side without HiCache load-back reservations (`reserve`, `release`): SGLang before 0.5.22
# has no `alloc_physical`; such a side gets version 3's traces, which make none.
NO_LOAD_BACK = "no HiCache load-back reservations (alloc_physical)"
# A side whose calls are in pages (a page of one token): an implementation written to the facade
# before page sizes (kvfuzz/impl/compaction/allocator.py); it gets version 4's traces (3's with
# NO_LOAD_BACK), all at page size 1.
ONE_TOKEN_PAGES = "pages of one token only (page_size 1)"


class CompactionCodec(TraceCodec):
    def describe(self, item):
        return [("params", ", ".join(f"{f.name}={getattr(item.params, f.name)}"
                                     for f in fields(item.params)))]


def _shape(path, obj):
    check_shape(path, obj, 2, "a factory(params, device) returning a lazy-compaction "
                "allocator (kvfuzz/impl/compaction/allocator.py)")


def _declare(impl, obj):
    """An upstream entry at another release: the adapted class read for `alloc_physical`."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    allocator = getattr(module, "MultiEndedAllocator", None)
    if allocator is None or hasattr(allocator, "alloc_physical") or \
            NO_LOAD_BACK in impl.preconditions:
        return impl
    return replace(impl, preconditions=impl.preconditions + (NO_LOAD_BACK,))


def _generator_for(impls):
    if any(NO_LOAD_BACK in impl.preconditions for impl in impls):
        return generator.VERSION_3
    if any(ONE_TOKEN_PAGES in impl.preconditions for impl in impls):
        return generator.VERSION_4
    return generator.GENERATOR


def _broken(trace, preconditions) -> list[str]:
    """A trace with reservations, or with pages of several tokens, for a side that declares it
    has none (a corpus file)."""
    broken = []
    if NO_LOAD_BACK in preconditions and any(isinstance(op, (Reserve, Release))
                                             for op in trace.ops):
        broken.append(f"{NO_LOAD_BACK}: the trace reserves pages")
    if ONE_TOKEN_PAGES in preconditions and trace.params.page_size > 1:
        broken.append(f"{ONE_TOKEN_PAGES}: the trace's pages are of {trace.params.page_size} "
                      f"tokens")
    return broken


CATALOGUE = Catalogue("compaction", IMPLEMENTATIONS, _shape, _declare,
                      fuzz_defaults=("compaction.lazy",),
                      declarable={"no_load_back": NO_LOAD_BACK,
                                  "one_token_pages": ONE_TOKEN_PAGES})

COMPACTION = trace_target(
    "compaction",
    codec=CompactionCodec(FORMAT, codec.from_json, to_json, codec.worst_input),
    inputs=TraceInputs(generator.GENERATOR, _generator_for, uniform.uniform_trace),
    # Op for op (I1-I11), then I12 against the bundled eager side if the implementation is lazy.
    judge=LockstepJudge(CompactionLockstep, describe_op, _broken,
                        options=lambda impl: {"eager": CATALOGUE.resolve(EAGER).load()},
                        checked=("  checked: every observable after every op, invariants "
                                 "I1-I11; I12 per trace of a lazy implementation",),
                        counted="ops and events"),
    catalogue=CATALOGUE,
    shrinker=TraceShrinker(budget=(300, 30.0)),
    default_cases=100, chunk_sizes=(2, 8),
    coverage_modules=("kvfuzz.fuzz.compaction.lockstep", "kvfuzz.oracle.compaction.model",
                      "kvfuzz.oracle.compaction.flush", "kvfuzz.oracle.compaction.invariants",
                      "kvfuzz.oracle.compaction.transitions", "kvfuzz.fuzz.compaction.loadback"))
