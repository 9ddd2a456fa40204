"""What targets whose input is a trace (a tuple of `ops` run in order against a stateful
allocator) share: generation from a `TraceGenerator`, JSON through the trace's codec, ids, sizes,
and shrinking by cutting after the failing op and dropping runs of ops."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from kvfuzz.fuzz.shrink import without_chunks
from kvfuzz.fuzz.summary import counts_grid
from kvfuzz.fuzz.target import AGREE, DIVERGE, OUTSIDE, Outcome, Target


STATUS_FEATURES = ["status:agree", "status:diverge", "status:known difference",
                   "status:outside contract"]


def trace_features(outcomes) -> Counter:
    """Atheris features of a trace: the events its target counted (each outcome's features),
    one function per event (`feature_names`), hit as often as the event happened."""
    found = Counter()
    for outcome in outcomes:
        found.update({f"event:{name}": count for name, count in Counter(outcome.features).items()})
        found[f"status:{outcome.status}"] += 1
    return found


class TraceTarget(Target):
    noun = "trace"
    chunk_sizes = (10, 200)
    fuzz_flags = ("-len_control=0", "-max_len=2048")  # long traces from the first input
    coverage_packages = ("kvfuzz.impl", "kvfuzz.oracle")
    seed_bytes = 1024  # some 100 ops' worth of choices: a trace cannot be encoded to seed from

    def __init__(self, generator, from_json, to_json):
        self.generator, self._from_json, self._to_json = generator, from_json, to_json

    def generate(self, seed, index):
        return self.generator.generate(seed, index)

    def from_bytes(self, data):
        return self.generator.from_bytes(data)

    def generator_for(self, impls):
        """The generator whose traces `impls` all support (by default the one generator)."""
        return self.generator

    def generate_for(self, impls, seed, index):
        return self.generator_for(impls).generate(seed, index)

    def from_bytes_for(self, impls, data):
        return self.generator_for(impls).from_bytes(data)

    def strategy(self, max_bytes: int = 4096):
        """Traces of this target's format, 1 to the generator's op limit: its seeded
        generator fed by up to `max_bytes` drawn bytes."""
        from kvfuzz.strategies.hypothesis_traces import traces  # imports hypothesis

        return traces(self.generator.from_bytes, max_bytes)

    def from_json(self, data, source):
        return self._from_json(data, source)

    def to_json(self, item):
        return self._to_json(item)

    def input_id(self, item):
        return item.trace_id()

    def shrink_candidates(self, item, divergence):
        """Cut after the failing op, the target's own cuts, then drop runs of ops."""
        if divergence.step is not None:
            yield replace(item, ops=item.ops[:divergence.step + 1])
        yield from self.fewer_parts(item)
        for ops in without_chunks(item.ops):
            yield replace(item, ops=ops)

    # A lock-step target: `judge` is its `kvfuzz.fuzz.lockstep.Lockstep` class (declared ops,
    # events, state views; its implementation side imports torch only when a trace runs),
    # `describe_op(op)` names an op in reports, and `broken_preconditions(trace,
    # preconditions)` lists the declared preconditions a trace breaks.
    judge: type | None = None
    broken_preconditions = staticmethod(lambda item, preconditions: [])
    describe_op = staticmethod(repr)

    @property
    def events(self) -> tuple:
        """The names its lock step counts: atheris features and the summary grid."""
        return self.judge.EVENTS

    def lockstep(self, item, impl, device: str):
        """The oracle and `impl` side by side over `item` (a target whose judge takes what the
        implementation declares overrides this)."""
        return self.judge(item, impl.load(), device)

    def check(self, item, impl, device="cpu") -> Outcome:
        outside = self.broken_preconditions(item, impl.preconditions)
        if outside:  # never run: the class says its callers never do this
            return Outcome(OUTSIDE, outside=tuple(outside), behaviour="not run")
        return self.lockstep_outcome(item, impl, self.lockstep(item, impl, device),
                                     self.describe_op)

    def lockstep_outcome(self, item, impl, lock, describe_op) -> Outcome:
        """Step `lock` (the oracle and `impl` in lock step over `item`) through every op; the first
        op with problems is the divergence, reported with its call and the three calls before."""
        for index, op in enumerate(item.ops):
            call, problems = lock.step(op)
            if problems:
                label = problems[0][0]
                lines = [("call", lock.log[-1] if call else "(none)")]
                lines += [("before", line) for line in lock.log[-4:-1]]
                lines += problems
                divergence = self.divergence(
                    item, impl, f"{label} at op {index} of {len(item.ops)}: {describe_op(op)}",
                    lines, (type(op).__name__, label), step=index)
                return Outcome(DIVERGE, divergence, features=lock.events)
        problems = lock.finish()
        if problems:
            label = problems[0][0]
            lines = [("before", line) for line in lock.log[-4:]] + problems
            divergence = self.divergence(item, impl, f"{label} at the end of the trace", lines,
                                         ("end", label))
            return Outcome(DIVERGE, divergence, features=lock.events)
        return Outcome(AGREE, features=lock.events)

    def summary_lines(self, found: Counter) -> list[str]:
        return counts_grid("calls and edge classes", found)

    def feature_names(self):
        return [f"event:{name}" for name in self.events] + STATUS_FEATURES

    def fuzz_features(self, item, outcomes):
        return trace_features(outcomes)

    def fewer_parts(self, item):
        """Smaller traces by the target's own structure (e.g. a request taken out)."""
        return iter(())

    def size(self, item):
        return (len(item.ops),)

    def size_text(self, item):
        return f"{len(item.ops)} ops"
