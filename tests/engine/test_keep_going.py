"""`kvfuzz diff --keep-going`: the run goes on after a divergence and reports every distinct
divergence signature of each implementation, each shrunk, saved and replayable; the counts are
every input's, whatever `--jobs`. Without it a run stops at each implementation's first."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

import kvfuzz
from kvfuzz.fuzz.engine.run import RunOptions, SeededRun
from kvfuzz.fuzz.engine.tally import Tally
from kvfuzz.fuzz.targets import TARGETS
from tests.engine.test_interrupts import start, stop, wait_for
from tests.helpers import kvfuzz_here, summary_rows

MUTANTS = ["mutant.allocator.free_no_dedup", "mutant.allocator.padding_page"]
REPORT = re.compile(r"DIVERGENCE  allocator  implementation (\S+)\n.*?\n  what      (.*?) at "
                    r"(?:op \d+ of \d+: (\w+)|the end)", re.S)


class _Found:
    def __init__(self, signature):
        self.signature = signature


def test_a_tally_keeps_the_lowest_input_of_each_signature():
    chunks = [Tally(), Tally(), Tally()]
    for tally, found in zip(chunks, [[(30, "a"), (31, "b")], [(12, "b")], [(40, "c")]]):
        for index, signature in found:
            tally._found(_Found(signature), index)
            tally.diverged += 1
    total = Tally()
    for tally in chunks:
        total.merge(tally)
    assert {sig: at for sig, (at, _) in total.findings.items()} == {"a": 30, "b": 12, "c": 40}
    assert [d.signature for d in total.found()] == ["b", "a", "c"] and total.diverged == 4
    total.only_first()  # a run without --keep-going: its first divergence is its finding
    assert list(total.findings) == ["b"] and total.diverged == 1


class _Dead:
    def current(self) -> int:
        return 7

    def stop(self) -> None:
        pass


@pytest.mark.parametrize("keep_going", [False, True])
def test_the_rest_of_a_dead_workers_chunk_is_checked_when_the_run_keeps_going(keep_going):
    target = TARGETS["extend"]
    impl = target.catalogue.resolve("torch.vectorized")
    run = SeededRun(target, [impl], RunOptions(cases=20, keep_going=keep_going), out=None)
    worker, task = _Dead(), (impl.name, 0, 20, 0.5)
    run.tasks[worker] = task
    run.progress.tick = lambda: None
    run._lost(worker, "crashed: SIGSEGV", "SIGSEGV")
    assert run.tallies[impl.name].at == 7
    expected = [(impl.name, 0, 7, 0.5)] + [(impl.name, 8, 20, 0.5)] * keep_going
    assert run.redo == expected


def _reports(err: str) -> list[tuple[str, str, str]]:
    return [(impl, label, op) for impl, label, op in REPORT.findall(err)]


@pytest.mark.slow  # runs kvfuzz's workers
def test_every_distinct_divergence_is_reported_saved_and_replays_whatever_the_jobs(tmp_path):
    args = ["diff", "allocator", *[a for m in MUTANTS for a in ("--impl", m)], "--impl",
            "allocator.torch", "--cases", 20, "--keep-going"]
    runs = {jobs: kvfuzz_here(*args, "--jobs", jobs, "--corpus", tmp_path / str(jobs))
            for jobs in (1, 2)}
    for ran in runs.values():
        assert ran.returncode == 1, ran.stderr[-3000:]
    one, two = (_reports(runs[jobs].stderr) for jobs in (1, 2))
    assert one == two and len(one) == len(set(one))  # the same findings, each once
    rows = summary_rows(runs[1].stderr)
    assert rows == {name: row[:-1] + [rows[name][-1]] for name, row in
                    summary_rows(runs[2].stderr).items()}  # every count but the rate
    for name in MUTANTS:
        cases, agree, outside, diverged, findings = map(int, rows[name][:5])
        assert cases == 20 == agree + outside + diverged  # every input, not up to the first
        assert findings == sum(impl == name for impl, _, _ in one) > 1, runs[1].stderr[-3000:]
    assert rows["allocator.torch"][:5] == ["20", "20", "0", "0", "0"]
    named = re.findall(r"replay    kvfuzz replay (\S+) --impl (\S+)", runs[1].stderr)
    assert len(named) == len(one) and {Path(p) for p, _ in named} == \
        set((tmp_path / "1").iterdir())  # every finding's file, and only those
    again = kvfuzz_here("replay", tmp_path / "1", *[a for m in MUTANTS for a in ("--impl", m)])
    replayed = {(impl, label, op, path) for impl, label, op, path in re.findall(
        REPORT.pattern + r".*?replay    kvfuzz replay (\S+) ", again.stdout, re.S)}
    assert {(impl, label, op, path) for (path, _), (impl, label, op) in zip(named, one)} <= \
        replayed  # each file fails its implementation the way its report says


@pytest.mark.slow
def test_the_python_api_keeps_going_too():
    result = kvfuzz.diff("allocator", MUTANTS[1], cases=20, keep_going=True)
    signatures = [d.signature for d in result.divergences]
    assert len(signatures) > 1 and len(set(signatures)) == len(signatures)
    assert result.tallies[MUTANTS[1]].cases == 20


@pytest.mark.slow  # a kvfuzz process, interrupted
def test_an_interrupted_keep_going_run_keeps_every_finding_so_far(tmp_path):
    proc = start("diff", "allocator", "--impl", MUTANTS[0], "--impl", MUTANTS[1],
                 "--cases", 100_000, "--keep-going", "--corpus", tmp_path)
    seen = wait_for(proc, "saved ")
    seen += wait_for(proc, "saved ")
    rest, _, _ = stop(proc, signal.SIGINT)
    assert proc.returncode == 130, rest[-2000:]
    saved = {Path(line.split("saved ", 1)[1].strip()) for line in "".join(seen).splitlines()
             + rest.splitlines() if line.strip().startswith("saved ")}
    reported = {Path(p) for p in re.findall(r"replay    kvfuzz replay (\S+) --impl", rest)}
    assert len(reported) >= 2 and reported <= set(tmp_path.iterdir()) <= saved
    assert "(interrupted: counts so far)  (--keep-going" in rest
