"""The parts of a target whose input is a trace (a tuple of `ops` run in order against a stateful
implementation): the codec of its trace module, its versioned `TraceGenerator`, a lock-step
judge (`lockstep.py`), and shrinking by cutting after the failing op, taking requests out and
dropping runs of ops. `trace_target(...)` builds the whole record from what differs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields, replace
from typing import Callable

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.crash_site import BUILDING, reached
from kvfuzz.fuzz.engine.shrink import without_chunks
from kvfuzz.fuzz.engine.summary import counts_grid
from kvfuzz.fuzz.engine.target import (AGREE, DIVERGE, OUTSIDE_CONTRACT, Outcome, Settings,
                                       Target)

STATUSES = ("agree", "diverge", "outside contract")


@dataclass(frozen=True)
class TraceCodec:
    format: str
    from_json: Callable
    to_json: Callable
    worst_input: Callable[[], dict]
    label: str = "trace"  # the report's line about the trace: (label, trace.describe())
    max_ops: int | None = None  # the format's op limit, where a live guard records (guard.py)
    noun = "trace"

    def input_id(self, item) -> str:
        return item.trace_id()

    def describe(self, item) -> list[tuple[str, str]]:
        return [(self.label, item.describe())]

    def owns(self, data) -> bool:
        return True


@dataclass(frozen=True)
class TraceInputs:
    """Traces from a `TraceGenerator`; `pick(impls)` gives the one whose traces all of `impls`
    support (what they declare), by default the one generator."""

    generator: object
    pick: Callable | None = None
    uniform: Callable | None = None  # uniform(rng, preconditions): the detection baseline trace

    def profiles(self) -> tuple[str, ...]:
        """The generator's profiles that `alone` runs one at a time (none: it has none)."""
        return getattr(self.generator, "profiles", tuple)()

    def alone(self, profile: str) -> "TraceInputs":
        return replace(self, generator=self.generator.alone(profile))

    def profile_of(self, origin) -> str | None:
        """The profile a generated input's `origin` must be regenerated under, or None."""
        find = getattr(self.generator, "profile_of", None)
        return find(origin.generator) if find else None

    def generator_for(self, impls):
        return self.pick(impls) if self.pick and impls else self.generator

    def generate(self, seed: int, index: int, impls=()):
        return self.generator_for(impls).generate(seed, index)

    def from_bytes(self, data: bytes, impls=()):
        return self.generator_for(impls).from_bytes(data)

    def encode(self, item):
        return None  # a trace's choices cannot be spelled back: campaigns seed from random bytes

    def strategy(self, max_bytes: int = 4096):
        """Traces of this format, 1 to the generator's op limit: the seeded generator fed by up
        to `max_bytes` drawn bytes."""
        from kvfuzz.strategies.hypothesis_traces import traces  # imports hypothesis

        return traces(self.generator.from_bytes, max_bytes)


@dataclass(frozen=True)
class LockstepJudge:
    """The oracle and `impl` side by side over a trace (`lockstep`, a `Lockstep` class). A trace
    that breaks a precondition the implementation declares (`broken(trace, preconditions)`
    names them) is outside its contract and never run; `options(impl)` is what the lock step
    takes from the implementation (e.g. its declarations)."""

    lockstep: type
    describe_op: Callable = repr
    broken: Callable = staticmethod(lambda item, preconditions: [])
    options: Callable = staticmethod(lambda impl: {})
    checked: tuple[str, ...] = ()          # summary lines before the counts: what is checked
    counted: str = "calls and edge classes"
    # (what, ((name, event), ...)): under each row, which of an implementation's variants its
    # traces ran on, by the event the lock step counts once per trace (unified: the tree core)
    variants: tuple = ()

    def check(self, target, item, impl, device="cpu") -> Outcome:
        outside = self.broken(item, impl.preconditions)
        if outside:  # never run: the class says its callers never do this
            return Outcome(OUTSIDE_CONTRACT, outside=tuple(outside), behaviour="not run")
        reached(BUILDING)  # where an implementation's process crashes, the op it was on
        lock = self.lockstep(item, impl.load(), device, **self.options(impl))
        for index, op in enumerate(item.ops):
            reached(index)
            call, problems = lock.step(op)
            if problems:
                return Outcome(DIVERGE, self.op_divergence(target, item, impl, lock, index,
                                                           call, problems),
                               features=lock.events)
        reached(len(item.ops))
        problems = lock.finish()
        if problems:
            label = problems[0][0]
            lines = [("before", line) for line in lock.log[-4:]] + problems + \
                lock.context_lines()
            return Outcome(DIVERGE, target.divergence(
                item, impl, f"{label} at the end of the trace", lines, ("end", label)),
                features=lock.events)
        return Outcome(AGREE, features=lock.events)

    def op_divergence(self, target, item, impl, lock, index: int, call, problems):
        """The report of op `index` of `item`, whose step logged `call` and found `problems`
        (a seeded run's, and a live guard's: `fuzz/engine/guard.py`)."""
        label, op = problems[0][0], item.ops[index]
        lines = [("call", lock.log[-1] if call else "(none)")]
        lines += [("before", line) for line in lock.log[-4:-1]] + problems + lock.context_lines()
        what = f"{label} at op {index} of {len(item.ops)}: {self.describe_op(op)}"
        return target.divergence(item, impl, what, lines, (type(op).__name__, label),
                                 step=index)

    def summary_lines(self, found: Counter) -> list[str]:
        return list(self.checked) + counts_grid(self.counted, found)

    def row_lines(self, tally) -> list[str]:
        """A trace stops at its first problem: how many ran to their last op."""
        if not tally.cases:
            return []
        lines = [f"    ran to the last op: {tally.agree:,}/{tally.cases:,} "
                 f"({tally.agree / tally.cases:.1%}); stopped early: {tally.diverged:,} at a "
                 f"divergence; "
                 f"not run (outside): {tally.outside:,}"]
        if self.variants:
            what, events = self.variants
            ran = ", ".join(f"{name} on {tally.features[event]:,}" for name, event in events
                            if tally.features[event]) or "none built"
            lines.append(f"    {what}: {ran} of {tally.cases:,} traces")
        return lines

    def feature_names(self) -> list[str]:
        return [f"event:{name}" for name in self.lockstep.EVENTS] + \
            [f"status:{status}" for status in STATUSES]

    def fuzz_features(self, item, outcomes) -> Counter:
        """The events each run counted (one feature per event, hit as often as it happened)."""
        found = Counter()
        for outcome in outcomes:
            found.update({f"event:{name}": count
                          for name, count in Counter(outcome.features).items()})
            found[f"status:{outcome.status}"] += 1
        return found


@dataclass(frozen=True)
class TraceShrinker:
    """Cut after the failing op; take one request out (`creates`: the op classes that start a
    request; empty: any op naming one), the latest first; the target's own cuts (`extra`);
    then drop runs of ops. `size(trace)` orders the candidates."""

    size: Callable = staticmethod(lambda item: (len(item.ops),))
    creates: tuple[type, ...] = ()
    extra: Callable = staticmethod(lambda item: iter(()))
    budget: tuple[int, float] = (3000, 20.0)

    def candidates(self, item, divergence):
        if divergence.step is not None:
            yield replace(item, ops=item.ops[:divergence.step + 1])
        for rid in sorted(self.requests(item), reverse=True):
            ops = tuple(op for op in (without_request(op, rid) for op in item.ops)
                        if op is not None)
            yield replace(item, ops=ops)
        yield from self.extra(item)
        for ops in without_chunks(item.ops):
            yield replace(item, ops=ops)

    def requests(self, item) -> set[int]:
        found = set()
        for op in item.ops:
            if not self.creates or isinstance(op, self.creates):
                found.update(getattr(op, "rids", ()))
                found.update([op.rid] if hasattr(op, "rid") else [])
        return found

    def size_text(self, item) -> str:
        return f"{len(item.ops)} ops"


def without_request(op, rid: int):
    """`op` with request `rid` taken out: None when the op is about `rid` alone. An op names
    requests by `rid`, or `src` (the one it shares from), or a `rids` tuple whose parallel
    tuple fields (e.g. `lens`) lose the same positions; a `share_from` of `rid` is dropped."""
    if rid in (getattr(op, "rid", None), getattr(op, "src", None)):
        return None
    names = [f.name for f in fields(op)]
    if rid in getattr(op, "rids", ()):
        keep = [i for i, r in enumerate(op.rids) if r != rid]
        if not keep:
            return None
        parallel = {name: tuple(getattr(op, name)[i] for i in keep) for name in names
                    if name == "rids" or name in PARALLEL}
        return replace(op, **parallel)
    if "share_from" in names and op.share_from == rid:
        return replace(op, share_from=None, share_pages=0)
    return op


PARALLEL = ("lens",)  # tuple fields that go with `rids`, position by position


def trace_target(name: str, *, codec: TraceCodec, inputs: TraceInputs, judge: LockstepJudge,
                 catalogue: Catalogue, shrinker: TraceShrinker = TraceShrinker(),
                 live: str | None = None, **settings) -> Target:
    """A trace target's record: its parts, and settings that differ from a trace target's
    (long traces from the first fuzzed input; some 100 ops' worth of choices per seed input;
    the oracle gets branch coverage too)."""
    base = dict(chunk_sizes=(10, 200), fuzz_flags=("-len_control=0", "-max_len=2048"),
                seed_bytes=1024, coverage_packages=("kvfuzz.impl", "kvfuzz.oracle"))
    return Target(name, codec, inputs, catalogue, judge, shrinker,
                  Settings(**{**base, **settings}), live)
