"""Hostile implementations (tests/engine/hostile.py) cannot make a run pass, hang, or lose
another finding: each fault is that implementation's reported, saved, replayable divergence, and
the run goes on for the others."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.forked import kvfuzz_forked
from tests.helpers import summary_rows

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # each test runs kvfuzz as a process of its own
FAULTS = {"segfault": "crashed: SIGSEGV", "aborts": "crashed: SIGABRT",
          "exits": "raised", "exits_hard": "crashed: the process exited with status 0",
          "interrupts": "raised KeyboardInterrupt", "hangs": "timed out after 2 s",
          "resizes": "output buffer changed", "retypes": "output buffer changed",
          "junk_on_pipe": "corrupted the worker protocol: junk on the worker's pipe",
          "huge_header_on_pipe": "corrupted the worker protocol: a message of 1073741824 bytes",
          "unfinished_frame_on_pipe": "corrupted the worker protocol: a message begun and never"}

# A frame begun and never finished is found when --timeout runs out, and (unlike a hang) it is
# shrunk: every try waits the whole timeout, some ten of them (14.8 s of the test at c063c08 at
# 2 s). torch.vectorized's extend cases, checked under the same timeout, take milliseconds.
TIMEOUTS = {"unfinished_frame_on_pipe": 1}


def kvfuzz(*args):
    """The command in a process of its own, forked from this one (`tests.forked`: its imports
    already done; the claims here are about the run, not Python's start-up)."""
    return kvfuzz_forked(*args, timeout=300)


def kvfuzz_fresh(*args):
    """The command in a fresh interpreter: the atheris campaigns, whose libFuzzer workers and
    their signals start from the program as a user starts it, and the --memory runs."""
    return subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_hostile_implementation_diverges_and_the_run_goes_on(fault, tmp_path):
    hostile = f"tests.engine.hostile:{fault}"
    timeout = TIMEOUTS.get(fault, 2)
    result = kvfuzz("diff", "extend", "--impl", hostile, "--impl", "torch.vectorized",
                    "--cases", 60, "--timeout", timeout, "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"DIVERGENCE  extend  implementation {hostile}" in result.stderr
    assert f"what      {FAULTS[fault]}" in result.stderr, result.stderr
    assert fault != "exits" or "actual    SystemExit: 0" in result.stderr
    row = next(line for line in result.stderr.splitlines() if "  torch.vectorized " in line)
    cases, agree, outside = map(int, row.split()[1:4])
    assert cases == 60 == agree + outside and row.split()[-2] == "no", row
    saved = list(tmp_path.iterdir())
    assert len(saved) == 1 and saved[0].name.startswith("extend-")
    again = kvfuzz("replay", saved[0], "--impl", hostile, "--timeout", timeout)
    assert again.returncode == 1 and FAULTS[fault] in again.stdout, again.stdout
    if fault == "segfault":  # the saved case is sound: the bundled implementations agree on it
        assert kvfuzz("replay", saved[0]).returncode == 0


def test_a_trace_target_survives_an_allocator_that_ends_the_process(tmp_path):
    hostile = "tests.engine.hostile:ExitsOnMerge"
    result = kvfuzz("diff", "allocator", "--impl", hostile, "--impl", "allocator.torch",
                    "--cases", 20, "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr
    assert "what      crashed: the process exited with status 3" in result.stderr
    assert [p.name[:10] for p in tmp_path.iterdir()] == ["allocator-"]
    row = next(line for line in result.stderr.splitlines() if "  allocator.torch " in line)
    assert row.split()[1:3] == ["20", "20"], row


@pytest.mark.parametrize("target, hostile, expected", [
    ("compaction", "garbage_snapshots", "TypeError: snapshot returned dict"),
    ("allocator", "NestedResults", "expected a 1-D int64 tensor")])
def test_results_of_the_wrong_shape_are_the_implementations_fault(target, hostile, expected,
                                                                  tmp_path):
    result = kvfuzz("diff", target, "--impl", f"tests.engine.hostile:{hostile}", "--cases", 20,
                    "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr
    assert "what      crash at op" in result.stderr and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="needs atheris")
@pytest.mark.parametrize("fault, expected", [
    ("exits_hard", "crashed: the process exited with status 0"),
    ("hangs_alarm_taken", "timed out after 2 s")])  # libFuzzer's SIGALRM taken over
def test_a_campaign_worker_ended_or_stalled_by_its_input_is_a_finding(fault, expected, tmp_path):
    """A worker that ends inside an input (whatever its status) or hangs there was once no
    finding: `os._exit(0)` read as a clean end, a hang with SIGALRM taken ran out the clock;
    the campaign exited 0 with nothing saved."""
    hostile = f"tests.engine.hostile:{fault}"
    result = kvfuzz_fresh("fuzz", "extend", "--impl", hostile, "--time", "8s", "--timeout", 2,
                    "--jobs", 1, "--corpus", tmp_path / "corpus", "--work", tmp_path / "work")
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"found: extend {hostile}: {expected}" in result.stderr, result.stderr[-3000:]
    assert "by the input they were checking" in result.stderr
    saved = list((tmp_path / "corpus").iterdir())
    assert len(saved) == 1
    again = kvfuzz("replay", saved[0], "--impl", hostile, "--timeout", 2)
    assert again.returncode == 1 and expected in again.stdout, again.stdout


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_file_two_reports_name_stays_and_nothing_else_is_left(jobs, tmp_path):
    """Both fail first on the same input: the segfault's report is shrunk, the hang's is not (a
    try that hangs costs the whole timeout). The shrink of one once deleted the file the
    other's report names."""
    hostiles = ["tests.engine.hostile:hangs", "tests.engine.hostile:segfault"]
    result = kvfuzz("diff", "extend", *[arg for h in hostiles for arg in ("--impl", h)],
                    "--cases", 30, "--timeout", 2, "--jobs", jobs, "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr
    named = re.findall(r"replay    kvfuzz replay (\S+) --impl (\S+)", result.stderr)
    assert sorted(impl for _, impl in named) == sorted(hostiles), result.stderr
    assert {Path(path).resolve() for path, _ in named} == set(tmp_path.iterdir())


@pytest.mark.parametrize("target, impls, cases", [
    ("allocator", ["mutant.allocator.free_no_dedup"], 300),
    ("extend", ["tests.engine.hostile:segfault", "torch.vectorized", "mutant.no_clamp"], 300),
    # ExitsOnMerge first ends its worker at index 9, again at 11 and later: 60 traces leave a
    # second worker 50 to run past it (allocator.torch runs every one, ~5 traces/s loaded).
    ("allocator", ["tests.engine.hostile:ExitsOnMerge", "allocator.torch"], 60)])
def test_results_do_not_depend_on_jobs(target, impls, cases, tmp_path):
    """Counts are those of the inputs up to each implementation's first divergence, and only
    the files the reports name are left: `--jobs 2` once counted the inputs a second worker ran
    past it, saved its later divergence too, and dropped what a crashed worker had not
    reported yet."""
    seen = []
    for jobs in (1, 2):
        where = tmp_path / f"jobs-{jobs}"
        result = kvfuzz("diff", target, *[arg for i in impls for arg in ("--impl", i)],
                        "--cases", cases, "--jobs", jobs, "--corpus", where)
        rows = {name: row[:4] for name, row in summary_rows(result.stderr).items()}
        seen.append((result.returncode, rows, sorted(p.name for p in where.iterdir())))
    assert seen[0] == seen[1]
    assert len(seen[0][2]) == sum(row[3] == "yes" for row in seen[0][1].values()) > 0


def _marked_processes(mark: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mark.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("hostile", ["leaves_child", "leaves_session", "leaves_fork",
                                     "leaves_daemon", "uses_pool"])
def test_nothing_an_implementation_starts_outlives_the_run(hostile, tmp_path):
    """Correct results, with processes started on the side: the run agrees, ends when its work
    does (a stray holding its output pipes once kept a caller waiting), and leaves nothing
    running; a Pool works (workers were daemonic: "not allowed to have children")."""
    mark = f"{600 + os.getpid() % 1000}.{len(hostile)}{os.getpid()}"
    env = dict(os.environ, KVFUZZ_TEST_MARK=mark)
    result = kvfuzz_forked("diff", "extend", "--impl", f"tests.engine.hostile:{hostile}",
                           "--cases", 30, "--corpus", tmp_path, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    left = _marked_processes(mark)
    for pid in left:
        os.kill(pid, 9)
    assert hostile == "uses_pool" or not left, f"{len(left)} process(es) left running"


@pytest.mark.parametrize("target, hostile, expected", [
    ("extend", "patches_the_judge", "what      wrong slot at output slot"),
    ("allocator", "ClaimsAgreement",
     "what      corrupted the worker protocol: its transcript ended before the check did")])
def test_an_implementation_that_patches_the_judge_is_judged_apart(target, hostile, expected,
                                                                   tmp_path):
    """Its module patches kvfuzz's comparison (wrong slots read as right) or the trace judge
    (every trace 'agrees', unrun) in the process that imports it: once that was the worker,
    and the run passed."""
    result = kvfuzz("diff", target, "--impl", f"tests.engine.hostile_judge:{hostile}",
                    "--cases", 40, "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert expected in result.stderr, result.stderr[-3000:]
    assert len(list(tmp_path.iterdir())) == 1


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="needs atheris")
def test_a_campaign_judges_apart_too(tmp_path):
    """The atheris worker runs the implementation (its coverage guides libFuzzer) but does not
    judge: patches_the_judge once passed a whole campaign, 0 failures."""
    hostile = "tests.engine.hostile_judge:patches_the_judge"
    result = kvfuzz_fresh("fuzz", "extend", "--impl", hostile, "--time", "10s", "--jobs", 1,
                    "--corpus", tmp_path / "corpus", "--work", tmp_path / "work")
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"found: extend {hostile}: wrong slot at output slot" in result.stderr


def test_a_global_patch_of_one_implementation_reaches_no_other(tmp_path):
    """patches_torch is correct and leaves torch.cumsum off by one: torch.vectorized, checked
    in the same worker after it, once diverged with it."""
    result = kvfuzz("diff", "extend", "--impl", "tests.engine.hostile:patches_torch", "--impl",
                    "torch.vectorized", "--cases", 60, "--corpus", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = summary_rows(result.stderr)
    assert [rows[name][:4] for name in ("tests.engine.hostile:patches_torch",
                                        "torch.vectorized")] == [["60", "60", "0", "no"]] * 2


@pytest.mark.parametrize("hostile", ["leaks_memory", "allocates_too_much"])
def test_memory_past_the_limit_is_the_implementations_divergence(hostile, tmp_path):
    """256 MiB kept per call (it once grew a worker to 4.4 GB), or one allocation of a TiB:
    either is the input's divergence under --memory, and the run goes on for the others."""
    path = f"tests.engine.hostile:{hostile}"
    # A fresh interpreter: a fork of this process would start with this process's resident
    # memory (a pytest worker's, upstream engines imported), counted against the 1 GiB.
    result = kvfuzz_fresh("diff", "extend", "--impl", path, "--impl", "torch.vectorized",
                          "--cases", 60, "--memory", "1G", "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "what      exceeded the memory limit of 1 GiB (--memory; " in result.stderr
    assert summary_rows(result.stderr)["torch.vectorized"][:4] == ["60", "60", "0", "no"]
    saved = list(tmp_path.iterdir())
    assert len(saved) == 1
    if hostile == "allocates_too_much":  # one input is enough to breach it again
        again = kvfuzz_fresh("replay", saved[0], "--impl", path, "--memory", "1G")
        assert again.returncode == 1 and "exceeded the memory limit" in again.stdout
