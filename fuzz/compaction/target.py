"""The "compaction" target: the unified-memory lazy-compaction allocator driven over traces, op by
op against the oracle with invariants I1-I11 (`lockstep.py`), then I12 (eager vs lazy, `i12.py`)
for a lazy implementation.

    kvfuzz diff compaction --cases 200 --jobs 2
    kvfuzz diff compaction --impl mutant.compaction.p2v_not_cleared --corpus /tmp/found
"""

from __future__ import annotations

from dataclasses import fields

from kvfuzz.fuzz.compaction.lockstep import CompactionLockstep
from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.impl.compaction import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.compaction import codec, generator, uniform
from kvfuzz.strategies.compaction.trace import FORMAT, describe_op, to_json

EAGER = "compaction.eager"  # I12's reference side


class CompactionCodec(TraceCodec):
    def describe(self, item):
        return [("params", ", ".join(f"{f.name}={getattr(item.params, f.name)}"
                                     for f in fields(item.params)))]


def _shape(path, obj):
    check_shape(path, obj, 2, "a factory(params, device) returning a lazy-compaction "
                "allocator (kvfuzz/impl/compaction/allocator.py)")


CATALOGUE = Catalogue("compaction", IMPLEMENTATIONS, _shape, fuzz_defaults=("compaction.lazy",))

COMPACTION = trace_target(
    "compaction",
    codec=CompactionCodec(FORMAT, codec.from_json, to_json, codec.worst_input),
    inputs=TraceInputs(generator.GENERATOR, uniform=uniform.uniform_trace),
    # Op for op (I1-I11), then I12 against the bundled eager side if the implementation is lazy.
    judge=LockstepJudge(CompactionLockstep, describe_op,
                        options=lambda impl: {"eager": CATALOGUE.resolve(EAGER).load()},
                        checked=("  checked: every observable after every op, invariants "
                                 "I1-I11; I12 per trace of a lazy implementation",),
                        counted="ops and events"),
    catalogue=CATALOGUE,
    shrinker=TraceShrinker(budget=(300, 30.0)),
    default_cases=100, chunk_sizes=(2, 8),
    coverage_modules=("kvfuzz.fuzz.compaction.lockstep", "kvfuzz.oracle.compaction.model",
                      "kvfuzz.oracle.compaction.flush", "kvfuzz.oracle.compaction.invariants",
                      "kvfuzz.oracle.compaction.transitions"))
