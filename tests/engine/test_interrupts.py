"""Interrupting a run at a random moment loses no finding and leaves no process behind: Ctrl-C
and SIGTERM stop `kvfuzz diff` with its summary, SIGKILL takes its workers with it, and the same
holds for `kvfuzz fuzz` campaigns, `kvfuzz replay` and `kvfuzz corpus minimize`.

Every run here starts with SIGINT ignored, as a non-interactive shell starts a background job
(`kvfuzz diff ... &` in a script, some CI runners): Python then installs no KeyboardInterrupt
handler of its own, and a `kill -INT` used to do nothing (issue 29). The signal goes to the
supervisor's pid alone, not to its process group as a terminal's Ctrl-C would."""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # every test here runs a kvfuzz command in a process of its own
needs_atheris = pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                                   reason="atheris not installed (pip install -e '.[fuzz]')")


STOPS_WITHIN = 20.0  # seconds from the signal to the exit: "a few", with a busy machine's slack


def ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited across exec, as from `cmd &`


def start(*args, stdout=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kvfuzz.fuzz.cli", *map(str, args)],
                            cwd=ROOT, stderr=subprocess.PIPE, stdout=stdout, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            preexec_fn=ignoring_sigint)


def stop(proc: subprocess.Popen, number=signal.SIGINT) -> tuple[str, float, str]:
    """Send one signal to the pid; (the rest of stderr, seconds until it exited, stdout)."""
    sent = time.monotonic()
    proc.send_signal(number)
    try:
        out, rest = proc.communicate(timeout=STOPS_WITHIN)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running {STOPS_WITHIN:g} s after signal {number}: "
                    f"{proc.communicate()[1][-2000:]}")
    return rest, time.monotonic() - sent, out or ""


def wait_for(proc: subprocess.Popen, text: str, seconds: float = 120) -> list[str]:
    """stderr lines up to the first holding `text` (the run is then under way)."""
    deadline, lines = time.monotonic() + seconds, []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if text in line:
            return lines
        if not line and proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"never saw {text!r}: {''.join(lines)[-2000:]}")


def survivors(marker: str, seconds: float = 10) -> list[str]:
    """Command lines of live processes that mention `marker`, after up to `seconds` to go."""
    deadline = time.monotonic() + seconds
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if marker in cmdline and "Z" not in (entry / "stat").read_text().split()[2]:
                    found.append(f"{entry.name}: {cmdline}")
            except (OSError, ValueError):
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def diff_run(corpus: Path) -> subprocess.Popen:
    # The mutant diverges within the first cases (saved at once); the slow one keeps going.
    return start("diff", "extend", "--impl", "mutant.no_clamp", "--impl",
                 "tests.engine.hostile:slow", "--cases", 100_000, "--jobs", 2,
                 "--corpus", corpus)


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("seed", [1, 2])
def test_interrupting_diff_keeps_its_findings_and_prints_the_summary(number, seed, tmp_path):
    proc = diff_run(tmp_path)
    wait_for(proc, "found: extend mutant.no_clamp")
    time.sleep(random.Random(seed).uniform(0, 1.5))
    rest, _, _ = stop(proc, number)
    assert proc.returncode == 130, rest
    assert "summary: extend  (interrupted" in rest and "Traceback" not in rest, rest
    assert [p.name[:7] for p in tmp_path.iterdir()] == ["extend-"]
    assert survivors(str(tmp_path)) == []


def test_killing_diff_outright_takes_its_workers_with_it(tmp_path):
    proc = diff_run(tmp_path)
    wait_for(proc, "found: extend mutant.no_clamp")
    proc.kill()
    proc.wait()
    assert survivors(str(tmp_path)) == []
    assert [p.name[:7] for p in tmp_path.iterdir()] == ["extend-"]


@needs_atheris
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGKILL])
def test_interrupting_a_campaign_keeps_its_findings_and_leaves_no_worker(number, tmp_path):
    proc = start("fuzz", "extend", "--impl", "mutant.owner_left_bisect", "--time", "5m",
                 "--jobs", 2, "--work", tmp_path / "work", "--corpus", tmp_path / "found")
    wait_for(proc, "found: extend mutant.owner_left_bisect")
    time.sleep(random.Random(number).uniform(0, 1.0))
    rest, _, _ = stop(proc, number)
    if number == signal.SIGINT:
        assert proc.returncode == 130 and "(interrupted" in rest, rest
    assert survivors(str(tmp_path / "work")) == []
    assert any(p.name.startswith("extend-") for p in (tmp_path / "found").iterdir())


@needs_atheris
def test_a_campaign_saves_an_input_that_crashes_its_worker(tmp_path):
    hostile = "tests.engine.hostile:segfault"
    # It crashes on almost any input: 8 s is ample (as test_isolation's campaign workers); the
    # campaign runs out its time after the crash, so the time is the test's cost.
    proc = start("fuzz", "extend", "--impl", hostile, "--time", "8s", "--jobs", 1,
                 "--work", tmp_path / "work", "--corpus", tmp_path / "found")
    rest = proc.communicate(timeout=180)[1]
    assert proc.returncode == 1, rest
    assert f"extend {hostile}: crashed: SIGSEGV" in rest, rest
    assert "WORKER CRASHES THAT SAVED NOTHING" not in rest
    saved = list((tmp_path / "found").iterdir())
    assert len(saved) == 1 and saved[0].name.startswith("extend-")


@pytest.mark.parametrize("phase", ["found:", "shrinking:"])
@pytest.mark.parametrize("seed", [3, 4, 5])
def test_one_sigint_to_the_pid_stops_diff_at_any_moment_mid_shrink_included(phase, seed,
                                                                            tmp_path):
    """One SIGINT, to the supervisor's pid only, at a random moment of the seeded run (workers
    busy) or of the shrinking that follows (a worker re-running candidates): exit 130 within
    seconds, the summary, the finding saved (first found, or shrunk), no process left."""
    proc = start("diff", "extend", "--impl", "tests.engine.hostile:slow_wrong", "--impl",
                 "tests.engine.hostile:slow", "--cases", 400, "--jobs", 2, "--corpus", tmp_path)
    seen = wait_for(proc, phase)
    time.sleep(random.Random(seed).uniform(0, 2.0))
    rest, took, _ = stop(proc)
    assert proc.returncode == 130, "".join(seen) + rest
    assert "summary: extend  (interrupted" in rest and "Traceback" not in rest, rest
    assert "DIVERGENCE  extend  implementation tests.engine.hostile:slow_wrong" in rest, rest
    assert [p.name[:7] for p in tmp_path.iterdir()] == ["extend-"], rest
    assert survivors(str(tmp_path)) == []
    print(f"{phase} +{took:.1f} s to exit")


def extend_files(into: Path, count: int = 6) -> list[Path]:
    """Seeded extend cases of three requests or more (where the hostile implementations
    misbehave), saved as corpus files."""
    from kvfuzz.fuzz.engine import corpus
    from kvfuzz.fuzz.targets import TARGETS

    target, picked = TARGETS["extend"], []
    for index in range(200):
        item = target.generator.generate(0, index)
        if len(item.prefix_lens) >= 3:
            picked.append(corpus.save(target, item, into))
        if len(picked) == count:
            return picked
    pytest.fail("the seeded extend cases changed: too few of three requests")


def wait_for_worker(proc: subprocess.Popen, seconds: float = 120) -> None:
    """Until the supervisor has a worker (its run is under way: a busy machine takes seconds
    to get there), then a moment for the worker to reach the input. A worker names itself
    "kvfuzz-worker"; the child that first imports an outside implementation
    (`fuzz/engine/apart.py`) does not."""
    deadline = time.monotonic() + seconds
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    while time.monotonic() < deadline and proc.poll() is None:
        if any(_name(child) == "kvfuzz-worker" for child in children.read_text().split()):
            time.sleep(random.Random(proc.pid).uniform(0.5, 1.5))
            return
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no worker started: {proc.communicate()[1][-2000:]}")


def _name(pid) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def test_one_sigint_stops_replay_inside_a_hanging_input(tmp_path):
    extend_files(tmp_path)
    proc = start("replay", tmp_path, "--impl", "tests.engine.hostile:hangs", "--timeout", 120,
                 stdout=subprocess.PIPE)
    wait_for_worker(proc)  # inside the first input, which hangs until the 120 s timeout
    rest, _, out = stop(proc)
    assert proc.returncode == 130, rest + out
    assert "replay interrupted after 0 of 6 file(s)" in out and "Traceback" not in rest, out
    assert survivors(str(tmp_path)) == []


def test_one_sigint_stops_corpus_minimize_and_removes_nothing(tmp_path):
    files = extend_files(tmp_path)
    proc = start("corpus", "minimize", tmp_path, "--impl", "tests.engine.hostile:hangs")
    wait_for_worker(proc)
    rest, _, _ = stop(proc)
    assert proc.returncode == 130 and "interrupted" in rest and "Traceback" not in rest, rest
    assert sorted(tmp_path.iterdir()) == sorted(files)
    assert survivors(str(tmp_path)) == []
