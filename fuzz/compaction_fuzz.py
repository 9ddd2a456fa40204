"""The compaction target of `kvfuzz fuzz`: fuzzer bytes -> compaction traces (the seeded
generator's own choices, read from the bytes), each replayed on an implementation against the
oracle; a divergence is saved as a trace file before the target raises."""

from __future__ import annotations

import json
import os

from kvfuzz.strategies.bytes_random import BytesRandom
from kvfuzz.fuzz.fuzz_targets import Finding
from kvfuzz.fuzz.harness import Harness, signals_held

DEFAULT_IMPL = "compaction.lazy"
MAX_OPS = 300


def decode_trace(data: bytes):
    from kvfuzz.strategies.compaction import generator as generator
    from kvfuzz.strategies.compaction.trace import Trace

    rng = BytesRandom(data)
    num_ops = 1 + rng.randrange(MAX_OPS)
    params = generator._params(rng)
    kinds, weights = zip(*generator._OPS)
    ops = tuple(generator._op(rng, rng.choices(kinds, weights)[0], params)
                for _ in range(num_ops))
    return Trace(params, ops, None)


def impl_names() -> list[str]:
    from kvfuzz.impl.compaction import IMPLEMENTATIONS
    return sorted(IMPLEMENTATIONS)


class CompactionHarness(Harness):
    def __init__(self, target: str = "compaction"):
        super().__init__(target)
        from kvfuzz.fuzz.compaction_i12 import replay

        self.replay = replay
        self.impls = [s for s in os.environ.get("KVFUZZ_IMPL", "").split(",") if s] or \
            [DEFAULT_IMPL]

    def test_one_input(self, data: bytes) -> None:
        from kvfuzz.fuzz.compaction_shrink import save_trace

        trace = decode_trace(data)
        for name in self.impls:
            found = self.replay(trace, name)
            if found is None:
                continue
            if self.failed(json.dumps(["compaction", *map(str, found.key())])):
                with signals_held():
                    save_trace(trace, self.found_dir)
                raise AssertionError(found.report())
        self.done_one()


def triage(path, impl_specs, stopping) -> list[Finding]:
    from pathlib import Path

    from kvfuzz.fuzz.compaction_i12 import replay
    from kvfuzz.fuzz.compaction_shrink import save_trace, shrink
    from kvfuzz.strategies.compaction.trace import loads

    trace = loads(Path(path).read_text())
    findings = []
    for name in impl_specs or [DEFAULT_IMPL]:
        if replay(trace, name) is None:
            continue
        small = trace if stopping() else shrink(trace, name)
        found = replay(small, name)
        findings.append(Finding(
            json.dumps(["compaction", *map(str, found.key())]), found.report().splitlines()[0],
            found.report(), save=lambda directory, small=small: save_trace(small, directory),
            replay=lambda saved, name=name: f"kvfuzz replay {saved} --impl {name}",
            note=f"shrunk from {len(trace.ops)} ops to {len(small.ops)}"))
    return findings
