"""Interrupting a run at a random moment loses no finding and leaves no process behind: Ctrl-C
and SIGTERM stop `kvfuzz diff` with its summary, SIGKILL takes its workers with it, and the same
holds for `kvfuzz fuzz` campaigns."""

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
needs_atheris = pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                                   reason="atheris not installed (pip install -e '.[fuzz]')")


def start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kvfuzz.fuzz.cli", *map(str, args)],
                            cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


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
    proc.send_signal(number)
    rest = proc.communicate(timeout=60)[1]
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
    proc.send_signal(number)
    rest = proc.communicate(timeout=60)[1]
    if number == signal.SIGINT:
        assert proc.returncode == 1 and "(interrupted" in rest, rest
    assert survivors(str(tmp_path / "work")) == []
    assert any(p.name.startswith("extend-") for p in (tmp_path / "found").iterdir())


@needs_atheris
def test_a_campaign_saves_an_input_that_crashes_its_worker(tmp_path):
    hostile = "tests.engine.hostile:segfault"
    proc = start("fuzz", "extend", "--impl", hostile, "--time", "20s", "--jobs", 1,
                 "--work", tmp_path / "work", "--corpus", tmp_path / "found")
    rest = proc.communicate(timeout=180)[1]
    assert proc.returncode == 1, rest
    assert f"extend {hostile}: crashed: SIGSEGV" in rest, rest
    assert "WORKER CRASHES THAT SAVED NOTHING" not in rest
    saved = list((tmp_path / "found").iterdir())
    assert len(saved) == 1 and saved[0].name.startswith("extend-")
