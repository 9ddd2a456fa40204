"""An outside implementation's import-time code never runs in the supervisor (`apart.py`): a
module that exits, exits hard, segfaults, hangs or raises something unprintable when imported
is a one-line error with exit 2 before any input (never an exit 0 with nothing run, never a
traceback); one that changes the working directory, the SIGINT handler or starts a thread
that never ends leaves the supervisor as it was, and its findings land in the --corpus given.
The commands run in this process (`kvfuzz_here`), so the supervisor's state is this test's."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from kvfuzz.fuzz.engine import catalogue
from kvfuzz.fuzz.engine import corpus
from tests.conftest import CORPUS
from tests.helpers import kvfuzz_here

MODULES = "tests.engine.hostile_import"


@pytest.mark.parametrize("module, says", [
    ("exits", "raised SystemExit: 0"),
    ("exits_hard", "ended the process that imports it: crashed: the process exited with status 0"),
    ("segfaults", "ended the process that imports it: crashed: SIGSEGV"),
    ("hangs", "ended the process that imports it: still running after 3 s"),
    ("raises_unprintable", "cannot import 'tests.engine.hostile_import.raises_unprintable': "
                           "Unprintable: (its message could not be read)"),
])
def test_a_module_that_misbehaves_when_imported_is_a_one_line_error(module, says, monkeypatch,
                                                                     tmp_path):
    # A short grace for the module that hangs (the test waits it out); the others end at once,
    # and get a long one so that a loaded machine (a segfaulting import importing torch first)
    # is never read as a hang.
    monkeypatch.setattr(catalogue, "LOAD_GRACE", 3.0 if module == "hangs" else 60.0)
    path = f"{MODULES}.{module}:alloc_extend"
    ran = kvfuzz_here("diff", "extend", "--impl", path, "--cases", 5, "--corpus", tmp_path)
    errors = ran.stderr.strip().splitlines()
    assert ran.returncode == 2 and len(errors) == 1, ran.stderr
    assert errors[0].startswith(f"kvfuzz: error: import path '{path}': {says}"), errors[0]
    assert "Traceback" not in ran.stderr and not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["replay", "fuzz"])
def test_replay_and_fuzz_refuse_it_the_same_way(command, tmp_path):
    path = f"{MODULES}.exits_hard:alloc_extend"
    args = (["replay", corpus.input_files([CORPUS])[0]] if command == "replay" else
            ["fuzz", "extend", "--time", "5s", "--work", tmp_path / "work", "--corpus", tmp_path])
    ran = kvfuzz_here(*args, "--impl", path)
    assert ran.returncode == 2, ran.stderr
    assert "crashed: the process exited with status 0" in ran.stderr, ran.stderr


def test_what_a_module_changes_when_imported_stays_out_of_the_supervisor(tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    handler, threads = signal.getsignal(signal.SIGINT), set(threading.enumerate())
    ran = kvfuzz_here("diff", "extend", "--impl", f"{MODULES}.settles_in:alloc_extend",
                      "--cases", 30, "--corpus", "found")
    assert ran.returncode == 0, ran.stderr
    assert os.getcwd() == str(tmp_path) and signal.getsignal(signal.SIGINT) == handler
    assert set(threading.enumerate()) == threads


def test_findings_land_in_the_corpus_given_whatever_the_module_does_to_its_directory(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ran = kvfuzz_here("diff", "extend", "--impl", f"{MODULES}.chdir_broken:alloc_extend",
                      "--cases", 200, "--corpus", "found")
    assert ran.returncode == 1, ran.stderr
    saved = list((tmp_path / "found").iterdir())
    assert len(saved) == 1 and f"found/{saved[0].name}" in ran.stderr, ran.stderr
