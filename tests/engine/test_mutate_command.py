"""`kvfuzz mutate` as a user runs it (a process of its own: slow tier): on kvfuzz's own Mamba
allocator the faults kvfuzz must see are killed, a survivor rerun alone keeps its verdict, the
results file resumes a run, --fail-under gates, bad input is one line; hostile mutants (one exits
its process, one hangs, one kills the worker it was forked from) cost only themselves; a mutant of a
set-up done once a process, before the fork, is rerun fresh and killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.forked import kvfuzz_forked

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
OURS = "kvfuzz.impl.mamba.slot_allocator"


def kvfuzz(*args, cwd, forked=False):
    """`kvfuzz mutate ARGS` in a fresh interpreter, or `forked` from this process (tests.forked:
    its imports done; for the usage errors, whose claim is the one line, not start-up)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if forked:
        return kvfuzz_forked("mutate", *args, cwd=cwd, env=env, timeout=600)
    return subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", "mutate", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def records(report_path: Path) -> dict:
    return {r["id"]: r for r in json.loads(report_path.read_text())["records"]}


def test_a_real_fault_is_killed_and_a_no_op_survives(tmp_path):
    ran = kvfuzz("mamba", "--impl", "mamba.torch", "--operator", "RemoveStatement",
                 "--cases", "40", "--json", "r.json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    found = records(tmp_path / "r.json")
    by_edit = {(r["function"], r["before"]): r["status"] for r in found.values() if "before" in r}
    # The free list never grows back: every later allocation sees it.
    assert by_edit[("MambaSlots.free", "self.free_slots = torch.cat((self.free_slots, "
                                       "free_index))")] == "killed"
    # A group begun inside an open one would keep the open one's slots from the free list.
    assert by_edit[("MambaSlots.alloc_group_begin", "self.alloc_group_end()")] == "killed"
    assert "score" in ran.stdout
    survivor = next((r for r in found.values() if r["status"] == "survived"), None)
    if survivor is not None:  # the report's one-line command runs it alone, same verdict
        again = kvfuzz("mamba", "--impl", "mamba.torch", "--cases", "40", "--only",
                       survivor["id"], cwd=tmp_path)
        assert again.returncode == 0 and "survived" in again.stdout, again.stdout


def test_the_results_file_resumes_and_fail_under_gates(tmp_path):
    args = ("mamba", "--impl", "mamba.torch", "--scope", f"{OURS}:MambaSlots._take",
            "--cases", "20", "--results", "res.jsonl")
    first = kvfuzz(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    done = (tmp_path / "res.jsonl").read_text().splitlines()
    second = kvfuzz(*args, "--fail-under", "101", cwd=tmp_path)
    assert second.returncode == 1 and "under --fail-under 101" in second.stderr
    assert f"resuming, {len(done) - 1} mutants done before" in second.stderr
    assert (tmp_path / "res.jsonl").read_text().splitlines() == done  # nothing re-run


@pytest.mark.parametrize("args, message", [
    (("--impl", "nope.nothing:X"), "cannot import 'nope.nothing'"),
    (("--impl", "mamba.torch", "--only", "x:1:1:Nope:0"), "--only x:1:1:Nope:0: no such mutant"),
    (("--impl", "mamba.torch", "--operator", "Nothing*"), "no mutants in"),
    (("--impl", "mamba.torch", "--scope", "nope.mod"), "--scope nope.mod: cannot import"),
    (("--impl", "mamba.torch", "--scope", f"{OURS}:Nope"), "defines no function or class"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    ran = kvfuzz("mamba", *args, "--cases", "5", cwd=tmp_path, forked=True)
    assert ran.returncode == 2 and message in ran.stderr and "Traceback" not in ran.stderr, \
        ran.stderr


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory):
    """One command for two claims (each kvfuzz start costs seconds of CI): the fixture's dead
    branches brought to life in `Slots` and in its once-a-process `register_policies`."""
    cwd = tmp_path_factory.mktemp("fixture_run")
    ran = kvfuzz("mamba", "--impl", "tests.engine.mutate_fixture:Slots",
                 "--scope", "tests.engine.mutate_fixture:Slots", "--scope",
                 "tests.engine.mutate_fixture:register_policies", "--operator",
                 "ReplaceFalseWithTrue", "--cases", "30", "--timeout", "3", "--jobs", "2",
                 "--json", "r.json", cwd=cwd)
    assert ran.returncode == 0, ran.stderr
    return ran, records(cwd / "r.json")


def test_hostile_mutants_cost_only_themselves(fixture_run):
    ran, found = fixture_run
    status = {r["function"]: r["status"] for r in found.values()}
    assert status == {"Slots.alloc": "crashed", "Slots.available_size": "timeout",
                      "Slots.free": "crashed", "register_policies": "killed"}, status
    assert "score 100.0%" in ran.stdout


def test_a_set_up_done_before_the_fork_is_rerun_fresh_and_killed(fixture_run):
    # The registry was filled by the worker's unmutated run: in the forked child the mutant
    # never ran and survived (the verdict before the fresh rerun existed); a fresh process,
    # which ran no case before placing it, runs it and refuses every allocation.
    ran, found = fixture_run
    (setup,) = [r for r in found.values() if r["function"] == "register_policies"]
    assert setup["forked"] == "survived" and setup["fresh"] and setup["ran"], setup
    assert setup["status"] == "killed" and "None vs success" in setup["what"], setup
    assert "rerun fresh 1" in ran.stdout and "1 killed there" in ran.stdout
    assert [r for r in found.values() if r.get("fresh")] == [setup]  # nothing else rerun


@pytest.mark.parametrize("check, killed", [
    ("assert twice(3) == 6", 4),  # every edit of `value * 2` changes twice(3)
    ("assert twice(0) == 0", 3),  # only those that change twice(0): removal, |, ^
    ("pass", 0),                  # a command that never calls it kills nothing
])
def test_also_run_puts_the_mutant_in_the_test_command(tmp_path, check, killed):
    # Four of the 14 mutants of `value * 2` (removal, |, &, ^): the command runs once per
    # mutant and once unmutated; these four still split twice(0) into killed (removal, |, ^)
    # and survived (&). `twice` lives in a module that imports nothing (`mutate_twice`): the
    # command's Python starts bare, not with torch (some 2 CPU s a run, 10 a test).
    command = f"{sys.executable} -c 'from tests.engine.mutate_twice import twice; {check}'"
    ran = kvfuzz("mamba", "--impl", "tests.engine.mutate_fixture:Slots", "--scope",
                 "tests.engine.mutate_twice:twice", "--operator", "RemoveStatement",
                 "--operator", "ReplaceBinaryOperator_Mul_Bit*", "--cases", "5", "--jobs", "2",
                 "--also-run", command, "--json", "r.json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    # kvfuzz's mamba traces never call `twice`: every mutant is a reach gap for it.
    assert report["counts"]["not reached"] == 4
    assert report["matrix"] == {"both": 0, "kvfuzz only": 0, "tests only": killed,
                                "neither": 4 - killed, "declared equivalent, tests kill": 0}


def test_also_run_refuses_a_command_failing_unmutated(tmp_path):
    ran = kvfuzz("mamba", "--impl", "mamba.torch", "--scope", f"{OURS}:MambaSlots._take",
                 "--cases", "5", "--also-run", "exit 3", cwd=tmp_path)
    assert ran.returncode == 2 and "fails on the unmutated code" in ran.stderr, ran.stderr


def test_an_interrupted_run_keeps_its_verdicts_and_resumes(tmp_path):
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    args = [sys.executable, "-m", "kvfuzz.fuzz.cli", "mutate", "mamba", "--impl", "mamba.torch",
            "--cases", "200", "--sample", "12", "--seed", "0", "--results", "res.jsonl"]
    process = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    results = tmp_path / "res.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (
            not results.exists() or len(results.read_text().splitlines()) < 6):
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and "interrupted" in err, err
    kept = len(results.read_text().splitlines()) - 1
    assert kept >= 5
    again = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0 and f"resuming, {kept} mutants done before" in again.stderr
    assert "not run" not in again.stdout.splitlines()[1]  # every mutant has its verdict now


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_stop_during_also_run_ends_the_test_commands_at_once(tmp_path, stop):
    # The test command passes unmutated at once and hangs on every mutant: a stop must kill
    # the commands in flight (sessions of their own, out of the signal's reach) and end the
    # run with 130, not wait for them. Before the fix it waited for each one's timeout.
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    marker = tmp_path / "hanging"
    command = (f"{sys.executable} -c \"import os, time, pathlib\n"
               f"if os.environ.get('KVFUZZ_MUTANT_MODULE'):\n"
               f"    pathlib.Path('{marker}').write_text(str(os.getpid())); time.sleep(300)\"")
    args = [sys.executable, "-m", "kvfuzz.fuzz.cli", "mutate", "mamba", "--impl",
            "tests.engine.mutate_fixture:Slots", "--scope",
            "tests.engine.mutate_fixture:Slots.twice", "--operator", "RemoveStatement",
            "--cases", "5", "--jobs", "2", "--also-run", command, "--also-timeout", "600",
            "--results", "res.jsonl"]
    process = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not marker.exists() and process.poll() is None:
        time.sleep(0.1)
    assert marker.exists(), process.communicate()[1]
    time.sleep(0.5)  # the pid written, the command asleep
    hanging = int(marker.read_text())
    stopped = time.monotonic()
    process.send_signal(getattr(signal, stop))
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and "interrupted" in err, err
    assert time.monotonic() - stopped < 30, "the stop waited for the test commands"
    with pytest.raises(ProcessLookupError):
        os.kill(hanging, 0)  # the hanging test command is gone with the run
    # No verdict was made up for the stopped mutants: none says the tests killed it.
    lines = [json.loads(line) for line in (tmp_path / "res.jsonl").read_text().splitlines()]
    assert not [r for r in lines if "tests" in r]
