"""The "compaction" target: the unified-memory lazy-compaction allocator driven over traces, op by
op against the oracle with invariants I1-I11 (`lockstep.py`), then I12 (eager vs lazy, `i12.py`)
for a lazy implementation.

    kvfuzz diff compaction --cases 200 --jobs 2
    kvfuzz diff compaction --impl mutant.compaction.p2v_not_cleared --corpus /tmp/found
"""

from __future__ import annotations

from collections import Counter
from dataclasses import fields

from kvfuzz.fuzz.compaction.lockstep import CompactionLockstep
from kvfuzz.fuzz.summary import counts_grid
from kvfuzz.fuzz.trace_target import TraceTarget
from kvfuzz.impl.compaction import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.compaction import codec, generator
from kvfuzz.strategies.compaction.trace import FORMAT, Trace, describe_op, to_json

EAGER = "compaction.eager"  # I12's reference side


class CompactionTarget(TraceTarget):
    name = "compaction"
    format = FORMAT
    judge = CompactionLockstep
    describe_op = staticmethod(describe_op)
    default_cases = 100
    chunk_sizes = (2, 8)
    shrink_budget = (300, 30.0)
    worst_input = staticmethod(codec.worst_input)
    implementations = IMPLEMENTATIONS
    fuzz_implementations = ("compaction.lazy",)
    coverage_modules = ("kvfuzz.fuzz.compaction.lockstep", "kvfuzz.oracle.compaction.model",
                        "kvfuzz.oracle.compaction.flush", "kvfuzz.oracle.compaction.invariants",
                        "kvfuzz.oracle.compaction.transitions")

    def validate(self, path, obj):
        check_shape(path, obj, 2, "a factory(params, device) returning a lazy-compaction "
                    "allocator (kvfuzz/impl/compaction/allocator.py)")

    def describe(self, item):
        return [("params", ", ".join(f"{f.name}={getattr(item.params, f.name)}"
                                     for f in fields(item.params)))]

    def lockstep(self, item: Trace, impl, device: str):
        """Op for op (I1-I11), then I12 against the bundled eager side if `impl` is lazy."""
        return self.judge(item, impl.load(), device, eager=self.resolve(EAGER).load())

    def summary_lines(self, found: Counter) -> list[str]:
        return ["  checked: every observable after every op, invariants I1-I11; "
                "I12 per trace of a lazy implementation"] + counts_grid("ops and events", found)


COMPACTION = CompactionTarget(generator.GENERATOR, codec.from_json, to_json)
