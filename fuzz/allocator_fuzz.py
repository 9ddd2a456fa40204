"""The allocator target of `kvfuzz fuzz`: fuzzer bytes -> allocator traces (the seeded
generator's own choices, read from the bytes), each run through an allocator class and the
oracle in lockstep; a divergence is saved as a trace file before the target raises. Documented
upstream differences (outside implementations) are counted, never raised."""

from __future__ import annotations

import json
import os

from kvfuzz.strategies.bytes_random import BytesRandom
from kvfuzz.fuzz.fuzz_targets import Finding
from kvfuzz.fuzz.harness import Harness, signals_held

DEFAULT_IMPL = "allocator.torch"
MAX_OPS = 200


def decode_trace(data: bytes):
    """As `strategies.allocator_random.generate`, with the bytes as the randomness."""
    from kvfuzz.strategies.allocator import generator as generator
    from kvfuzz.strategies.allocator.trace import Trace

    rng = BytesRandom(data)
    num_ops = 1 + rng.randrange(MAX_OPS)
    P = rng.choice(generator.PAGE_SIZES)
    num_pages = rng.choice((rng.randint(2, 8), rng.randint(8, 24), rng.randint(24, 64)))
    size = num_pages * P + (rng.randint(0, P - 1) if rng.random() < 0.25 else 0)
    need_sort = rng.random() < 0.5
    misuse = rng.random() < generator.MISUSE_RATE
    debug = misuse or rng.random() < 0.1
    gen = generator._Generator(rng, P, num_pages, misuse)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(P, size, need_sort, tuple(gen.ops[:num_ops]), debug, None)


def impl_names() -> list[str]:
    from kvfuzz.impl.allocator_registry import allocators
    return [impl.name for impl in allocators()]


def _signature(found) -> str:
    return json.dumps(["allocator", *map(str, found.key())])


class AllocatorHarness(Harness):
    def __init__(self, target: str = "allocator"):
        super().__init__(target)
        from kvfuzz.fuzz.allocator_diff import run_trace

        self.run_trace = run_trace
        self.impls = [s for s in os.environ.get("KVFUZZ_IMPL", "").split(",") if s] or \
            [DEFAULT_IMPL]

    def test_one_input(self, data: bytes) -> None:
        from kvfuzz.fuzz.corpus import save_json
        from kvfuzz.strategies.allocator.trace import to_json

        trace = decode_trace(data)
        for name in self.impls:
            found = self.run_trace(trace, name)
            if found is None:
                continue
            if self.failed(_signature(found)) and found.known is None:
                with signals_held():
                    save_json(to_json(trace), found.corpus_name(), self.found_dir)
                raise AssertionError(found.report())
        self.done_one()


def triage(path, impl_specs, stopping) -> list[Finding]:
    from kvfuzz.fuzz.allocator_diff import run_trace
    from kvfuzz.fuzz.allocator_shrink import shrink
    from kvfuzz.fuzz.corpus import load_any, save_json
    from kvfuzz.strategies.allocator.codec import decode_trace as parse
    from kvfuzz.strategies.allocator.trace import to_json

    _, data = load_any(path)
    trace = parse(data, str(path))
    findings = []
    for name in impl_specs or [DEFAULT_IMPL]:
        found = run_trace(trace, name)
        if found is None or found.known is not None:
            continue
        small = found if stopping() else shrink(found)
        findings.append(Finding(
            _signature(small), small.headline(), small.report(),
            save=lambda directory, small=small: save_json(to_json(small.trace),
                                                          small.corpus_name(), directory),
            replay=lambda saved, name=name: f"kvfuzz replay {saved} --impl {name}",
            note=f"shrunk from {len(trace.ops)} ops to {len(small.trace.ops)}"))
    return findings
