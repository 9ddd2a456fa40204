"""`kvfuzz bench harness`, the trace targets' floor: where one trace's CPU time goes, and how
fast a target could go if kvfuzz cost nothing.

A trace is checked twice: on the implementation's side (`transcript.record_check`: the driver
calls the implementation, every answer recorded) and on the judge's (`Replay`: the oracle, the
comparison, the transcript replayed). Both are timed here in one process, without a profiler.
Then the implementation's side is run again under cProfile and its time split by whose code ran:
the engine's own frames (the upstream package: SGLang or vLLM) and what they call (torch, the
interpreter's built-ins, a Rust core), against kvfuzz's (driver, state reads, transcript). What
the engine's frames take is what the implementation costs with no harness at all, so
`1 / (its seconds per trace)` is a ceiling no change to kvfuzz can pass on this machine with
these traces. (cProfile slows small Python functions more than big C calls, so the engine's
share is read from the profile and applied to the unprofiled time: an estimate, said so.)
"""

from __future__ import annotations

import cProfile
import importlib.util
import pstats
import time

from kvfuzz.fuzz.engine import transcript
from kvfuzz.impl.registry import set_loader

# (target, implementation, traces, --quick's): the upstream class of every trace target.
ROWS = (("allocator", "sglang.paged", 60, 6), ("swa", "sglang.swa", 60, 6),
        ("mamba", "sglang.mamba", 100, 10), ("radix", "sglang.radix", 60, 6),
        ("radix", "sglang.radix.pure_swa", 60, 6),
        ("unified", "sglang.unified.rust", 30, 3), ("unified", "sglang.unified.python", 30, 3),
        ("compaction", "sglang.compaction.lazy", 10, 2),
        ("blockpool", "vllm.blockpool", 60, 6), ("kvmanager", "vllm.kvmanager", 60, 6),
        ("offload", "vllm.offload.lru", 60, 6))
# --quick (CI's smoke run): one engine's row, SGLang's (an import of some 5 CPU s; vLLM's
# block pool, some 10 more, left the smoke no other path: 2026-12-07)
QUICK_ROWS = {("mamba", "sglang.mamba")}
ENGINES = ("/sglang/", "/vllm/", "/sgl_kernel/")


def needs(impl: str) -> str | None:
    engine = impl.split(".")[0]
    if engine in ("sglang", "vllm") and importlib.util.find_spec(engine) is None:
        return engine
    return None


def _record(target, impl, items, own) -> list:
    transcripts = []
    for item in items:
        sent = []
        transcript.record_check(target, item, impl, "cpu", own, 1 << 34, sent.append)
        transcripts.append(sent)
    return transcripts


def _replay(target, impl, items, transcripts) -> None:
    for item, sent in zip(items, transcripts):
        records = [record for message in sent for record in transcript.read_batch(message)[0]]
        replay = transcript.Replay(records, 1 << 34)
        set_loader(replay.load)
        try:
            target.check(item, impl)
        finally:
            set_loader(None)


def engine_share(profile: pstats.Stats) -> float:
    """The engine's share of the profiled time: its frames' own time, and the time of whatever
    they called that is not kvfuzz's (torch, built-ins, the standard library), each call edge's
    time given to its caller's side."""
    stats = profile.stats
    fraction: dict = {}  # function -> the engine's fraction of its own time

    def engine_fraction(func) -> float:
        if func in fraction:
            return fraction[func]
        filename = func[0]
        if any(part in filename for part in ENGINES):
            return fraction.setdefault(func, 1.0)
        if "/kvfuzz/" in filename or filename.startswith(_KVFUZZ_ROOT) or func not in stats:
            return fraction.setdefault(func, 0.0)
        fraction[func] = 0.0  # a cycle back here counts as kvfuzz's
        callers = stats[func][4]
        total = sum(edge[2] for edge in callers.values())
        fraction[func] = (sum(edge[2] * engine_fraction(caller) for caller, edge
                              in callers.items()) / total) if total else 0.0
        return fraction[func]

    engine = sum(own * engine_fraction(func) for func, (_, _, own, _, _) in stats.items())
    total = sum(own for _, _, own, _, _ in stats.values())
    return engine / max(total, 1e-12)


_KVFUZZ_ROOT = __file__.rsplit("/bench/", 1)[0]


def row(target_name: str, impl_name: str, traces: int) -> str:
    from kvfuzz.fuzz.targets import TARGETS

    target = TARGETS[target_name]
    impl = target.catalogue.resolve(impl_name)
    own = (impl.path, impl.load())
    items = [target.generator.generate(0, index, [impl]) for index in range(traces)]
    _record(target, impl, items[:1], own)  # warm-up: first calls, lazy imports
    began = time.process_time()
    transcripts = _record(target, impl, items, own)
    record = (time.process_time() - began) / traces
    began = time.process_time()
    _replay(target, impl, items, transcripts)
    judge = (time.process_time() - began) / traces
    profiler = cProfile.Profile()
    profiler.runcall(_record, target, impl, items, own)
    share = engine_share(pstats.Stats(profiler))
    ops = sum(len(getattr(item, "ops", ())) for item in items) / traces
    engine = record * share
    return (f"| {target_name} | {impl_name} | {ops:.0f} | {1000 * record:.1f} "
            f"| {1000 * judge:.1f} | {share:.0%} | {1000 * engine:.1f} "
            f"| {1 / (record + judge):,.1f} | {1 / max(engine, 1e-9):,.0f} |")


def main(quick: bool) -> int:
    print("\nWhere a trace's CPU goes (one process, no isolation, seed 0): the implementation's "
          "side (`record_check`) and the judge's (`Replay`) per trace, the engine's share of "
          "the implementation's side (cProfile, each call edge to its caller: the engine's "
          "frames and the torch and built-in calls they make), and the ceiling that share "
          "sets: traces per CPU second if kvfuzz cost nothing.\n")
    print("| target | implementation | ops/trace | impl side ms | judge ms | engine share "
          "| engine ms | traces per CPU s now | ceiling (engine alone) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for target, impl, full, small in ROWS:
        if quick and (target, impl) not in QUICK_ROWS:
            continue
        missing = needs(impl)
        if missing:
            print(f"| {target} | {impl} | not run: needs {missing} (kvfuzz upstream fetch) "
                  "| | | | | | |", flush=True)
            continue
        print(row(target, impl, small if quick else full), flush=True)
    return 0
