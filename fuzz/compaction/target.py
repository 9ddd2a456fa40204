"""The "compaction" target: the unified-memory lazy-compaction allocator driven over traces, op by
op against the oracle with invariants I1-I11 (`lockstep.py`), then I12 (eager vs lazy, `i12.py`)
for a lazy implementation.

    kvfuzz diff compaction --cases 200 --jobs 2
    kvfuzz diff compaction --impl mutant.compaction.p2v_not_cleared --corpus /tmp/found
"""

from __future__ import annotations

from collections import Counter
from dataclasses import fields

from kvfuzz.fuzz.compaction.i12 import check_i12
from kvfuzz.fuzz.compaction.lockstep import EVENTS, Crashed, Found, Guarded, run_trace
from kvfuzz.fuzz.summary import counts_grid
from kvfuzz.fuzz.target import AGREE, DIVERGE, Outcome
from kvfuzz.fuzz.trace_target import TraceTarget
from kvfuzz.impl.compaction import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.compaction import codec, generator
from kvfuzz.strategies.compaction.trace import FORMAT, Trace, describe_op, to_json

EAGER = "compaction.eager"  # I12's reference side


class CompactionTarget(TraceTarget):
    name = "compaction"
    format = FORMAT
    events = EVENTS
    default_cases = 100
    chunk_sizes = (2, 8)
    shrink_budget = (300, 30.0)
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

    def check(self, item: Trace, impl, device="cpu") -> Outcome:
        """Op for op (I1-I11), then I12 if the implementation is lazy."""
        factory = impl.load()
        found, events = run_trace(item, factory, device)
        if found is None:
            try:
                if Guarded(factory, item.params, device).lazy:
                    found = check_i12(item, factory, self.resolve(EAGER).load(), device)
            except Crashed as crash:
                found = Found(None, None, [f"crash {type(crash.__cause__).__name__}: "
                                           f"{crash.__cause__}"])
        if found is None:
            return Outcome(AGREE, features=events)
        return Outcome(DIVERGE, self._divergence(item, impl, found), features=events)

    def _divergence(self, item: Trace, impl, found: Found):
        label = found.label()
        op = item.ops[found.op_index] if found.op_index is not None else None
        where = (f"op {found.op_index} of {len(item.ops)}: {describe_op(op)}" if op else
                 "the end of the trace (final comparison)")
        lines = [("this op" if i == len(found.context) - 1 else "earlier", line)
                 for i, line in enumerate(found.context)]
        lines += [("problem", problem) for problem in found.problems]
        return self.divergence(
            item, impl, f"{label} at {where}; pool {found.pool or '-'}", lines,
            (type(op).__name__ if op else "end", found.pool, label), step=found.op_index)

    def summary_lines(self, found: Counter) -> list[str]:
        return ["  checked: every observable after every op, invariants I1-I11; "
                "I12 per trace of a lazy implementation"] + counts_grid("ops and events", found)



COMPACTION = CompactionTarget(generator.GENERATOR, codec.from_json, to_json)
