"""`kvfuzz diff allocator` and `kvfuzz replay` of "kvfuzz-allocator-trace/1" files: seeded traces
through allocator classes and the oracle, chunks over worker processes, progress, shrinking, corpus.

    kvfuzz diff allocator --cases 2000 --jobs 2
    kvfuzz diff allocator --impl sglang.srt.mem_cache.allocator.paged:PagedTokenToKVPoolAllocator
Exit status: 0 no divergence (known upstream differences are counted and shown, not failures),
1 a divergence (shrunk, saved under corpus/, report printed). Imports torch only when run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kvfuzz.fuzz import diff_campaign
from kvfuzz.fuzz.summary import counts, table
from kvfuzz.fuzz.targets import Target, register

FORMAT = "kvfuzz-allocator-trace/1"


@dataclass
class Tally(diff_campaign.Tally):
    known: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # known class -> first divergence
    events: Counter = field(default_factory=Counter)

    def add(self, found) -> None:
        if found is None or not found.known:
            return super().add(found)
        self.cases += 1
        self.known[found.known] += 1
        self.examples.setdefault(found.known, found)

    def merge(self, other: "Tally") -> None:
        super().merge(other)
        self.known.update(other.known)
        self.events.update(other.events)
        for known, example in other.examples.items():
            self.examples.setdefault(known, example)


def run_chunk(spec: str, seed: int, start: int, stop: int, device: str) -> Tally:
    """Traces [start, stop) of `seed` on one implementation; stops at the first divergence."""
    from kvfuzz.fuzz.allocator_diff import run_trace
    from kvfuzz.strategies.allocator.trace import generate_trace

    tally = Tally()
    return diff_campaign.run_indices(tally, start, stop, lambda index: run_trace(
        generate_trace(seed, index), spec, device, events=tally.events))


def diff_main(args, out=None) -> int:
    from kvfuzz.impl.allocator_registry import allocators, resolve_allocator
    from kvfuzz.impl.registry import BUNDLED

    impls = [resolve_allocator(spec) for spec in args.impl] or allocators(BUNDLED)
    target = diff_campaign.DiffTarget("allocator", run_chunk, summary, _finish, Tally,
                                      unit="traces", chunk_sizes=(10, 200))
    return diff_campaign.run(target, [impl.name for impl in impls], args, out)


def _finish(tallies: dict, args, out) -> int:
    """Shrink, save and print the divergence of each implementation and one example per known
    upstream difference; returns the exit status."""
    from kvfuzz.fuzz.allocator_shrink import shrink
    from kvfuzz.fuzz.corpus import save_json
    from kvfuzz.strategies.allocator.trace import to_json

    status = 0
    for tally in tallies.values():
        found = ([tally.divergence] if tally.divergence else []) + list(tally.examples.values())
        for divergence in found:
            status = max(status, 0 if divergence.known else 1)
            small = shrink(divergence, args.device)
            small.saved_path = str(save_json(to_json(small.trace), small.corpus_name(),
                                             args.corpus))
            print(small.report(), file=out)
    return status


def summary(tallies: dict, elapsed: float, interrupted: bool = False) -> str:
    def known_lines(tally):
        return [f"known upstream difference x{count}: {known.split(':')[0]}"
                for known, count in tally.known.items()]

    lines = table("allocator", tallies, interrupted, "traces",
                  [("known", lambda tally: sum(tally.known.values()))], known_lines)
    lines += counts("calls and edge classes", tallies, "events")
    return "\n".join(lines + [f"  wall time {elapsed:.1f} s"])


def replay_file(path, data: dict, impl_specs, out) -> int:
    """Replay one saved trace on each implementation (default: the bundled ones)."""
    from kvfuzz.fuzz.allocator_diff import run_trace
    from kvfuzz.impl.allocator_registry import allocators, resolve_allocator
    from kvfuzz.impl.registry import BUNDLED
    from kvfuzz.strategies.allocator.trace import from_json

    trace = from_json(data, source=str(path))
    impls = [resolve_allocator(spec) for spec in impl_specs] or allocators(BUNDLED)
    status = 0
    for impl in impls:
        found = run_trace(trace, impl.name)
        if found is None:
            print(f"ok                {path}  {impl.name}", file=out)
            continue
        found.saved_path = str(path)
        status = max(status, 0 if found.known else 1)
        print(found.report(), file=out)
    return status


def describe() -> list[tuple[str, str, str]]:
    from kvfuzz.impl.allocator_registry import allocators

    return [(impl.name, impl.kind, impl.summary) for impl in allocators()]


register(Target("allocator", FORMAT, diff="kvfuzz.fuzz.allocator_target:diff_main",
                replay="kvfuzz.fuzz.allocator_target:replay_file",
                describe="kvfuzz.fuzz.allocator_target:describe"))
