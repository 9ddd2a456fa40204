"""`kvfuzz diff compaction` and `kvfuzz replay` of "kvfuzz-compaction-trace/1" files: seeded traces
through lazy-compaction allocators and the oracle, op by op (invariants I1-I11), plus I12 (eager vs
lazy after an urgent flush) for a lazy implementation; a divergence is shrunk and saved.

    kvfuzz diff compaction --cases 200 --jobs 2
    kvfuzz diff compaction --impl mutant.compaction.p2v_not_cleared --corpus /tmp/found
Exit status: 0 no divergence, 1 a divergence (shrunk, saved, report printed). Imports torch only
when run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial

from kvfuzz.fuzz import diff_campaign
from kvfuzz.fuzz.summary import counts, table
from kvfuzz.fuzz.targets import Target, register
from kvfuzz.impl.registry import BUNDLED, MUTANT

FORMAT = "kvfuzz-compaction-trace/1"
DEFAULT = ("compaction.lazy", "compaction.eager")
# What `kvfuzz list` says (kind, summary); impl.compaction.IMPLEMENTATIONS holds the factories.
ABOUT = {
    "compaction.lazy": (BUNDLED, "lazy free into holes, batched flush and commit (spec §3)"),
    "compaction.eager": (BUNDLED, "eager free: compacts inside free, never a hole"),
    "compaction.before": ("baseline", "lazy, commit with one host read per page (before PR 34066)"),
    "mutant.compaction.pending_replaced": (MUTANT, "a second pending batch replaces the first"),
    "mutant.compaction.p2v_not_cleared": (MUTANT, "commit leaves p2v of its sources bound"),
    "mutant.compaction.kv_not_moved": (MUTANT, "commit remaps the tables, never copies KV rows"),
}


@dataclass
class Tally(diff_campaign.Tally):
    ops: Counter = field(default_factory=Counter)  # op kind -> ops run

    def merge(self, other: "Tally") -> None:
        super().merge(other)
        self.ops.update(other.ops)


def run_chunk(spec: str, seed: int, start: int, stop: int, device: str) -> Tally:
    """Traces [start, stop) of `seed` on one implementation, checked as `kvfuzz replay` checks
    them (I12 too, if it is lazy); stops at the first divergence."""
    tally = Tally()

    def outcome(index: int):
        from kvfuzz.fuzz.compaction_i12 import replay
        from kvfuzz.strategies.compaction.trace import generate_trace

        trace = generate_trace(seed, index)
        tally.ops.update(type(op).__name__.lower() for op in trace.ops)
        return replay(trace, spec, device)

    return diff_campaign.run_indices(tally, start, stop, outcome)


def resolve(specs) -> list[str]:
    """The names to run (default: lazy and eager); an unknown one is the user's mistake."""
    from kvfuzz.impl.compaction import IMPLEMENTATIONS
    from kvfuzz.impl.registry import ImplementationError

    for spec in specs:
        if spec not in IMPLEMENTATIONS:
            raise ImplementationError(f"unknown implementation {spec!r} for target 'compaction' "
                                      f"(known: {', '.join(IMPLEMENTATIONS)})")
    return list(specs) or list(DEFAULT)


def diff_main(args, out=None) -> int:
    target = diff_campaign.DiffTarget("compaction", run_chunk, summary, _finish, Tally,
                                      unit="traces", chunk_sizes=(2, 8))
    return diff_campaign.run(target, resolve(args.impl), args, out)


def _finish(tallies: dict, args, out) -> int:
    """Shrink each implementation's divergence, save it, print the shrunk trace's report."""
    from kvfuzz.fuzz.compaction_i12 import replay
    from kvfuzz.fuzz.compaction_shrink import save_trace, shrink

    check = partial(replay, device=args.device)
    status = 0
    for tally in tallies.values():
        if tally.divergence is None:
            continue
        status, found = 1, tally.divergence
        small = shrink(found.trace, found.impl, check)
        found = check(small, found.impl) or found
        found.saved_path = str(save_trace(small, args.corpus))
        print(found.report(), file=out)
    return status


def summary(tallies: dict, elapsed: float, interrupted: bool = False) -> str:
    lines = table("compaction", tallies, interrupted, "traces")
    lines.append("  checked: every observable after every op, invariants I1-I11; "
                 "I12 per trace of a lazy implementation")
    lines += counts("ops run", tallies, "ops")
    return "\n".join(lines + [f"  wall time {elapsed:.1f} s"])


def replay_file(path, data: dict, impl_specs, out) -> int:
    """Replay one saved trace on each implementation (default: lazy and eager)."""
    from kvfuzz.fuzz.compaction_i12 import replay
    from kvfuzz.strategies.paged.case import CaseFormatError
    from kvfuzz.strategies.compaction.trace import TraceFormatError, from_json

    try:
        trace = from_json(data)
    except TraceFormatError as error:
        raise CaseFormatError(f"{path}: {error}") from None
    status = 0
    for spec in resolve(impl_specs):
        found = replay(trace, spec)
        if found is None:
            print(f"ok                {path}  {spec}", file=out)
            continue
        status, found.saved_path = 1, str(path)
        print(found.report(), file=out)
    return status


def describe() -> list[tuple[str, str, str]]:
    from kvfuzz.impl.compaction import IMPLEMENTATIONS

    return [(name, *ABOUT.get(name, ("", ""))) for name in IMPLEMENTATIONS]


register(Target("compaction", FORMAT, diff="kvfuzz.fuzz.compaction_target:diff_main",
                replay="kvfuzz.fuzz.compaction_target:replay_file",
                describe="kvfuzz.fuzz.compaction_target:describe"))
