"""A process that dies or hangs says where: the Python stack at the crash (faulthandler in the
implementation's process, read back by its judge), the implementation's own innermost frame,
the trace op it was running (shrinking cuts after it), all in the report and in the saved
file's note. Before, a crash read "crashed: SIGSEGV" and nothing more."""

from __future__ import annotations

import ctypes
import json
import re
import threading
from pathlib import Path

import pytest
import torch

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.engine.crash_site import site_of
from kvfuzz.fuzz.engine.isolation import crash_outcome
from kvfuzz.fuzz.targets import TARGETS
from tests.helpers import kvfuzz_here

ENGINE = Path(corpus.__file__).resolve().parent  # fuzz/engine/
HOSTILE = "tests/engine/hostile.py"


def _frame(path, line: int, name: str) -> str:
    return f'  File "{path}", line {line} in {name}'


def test_the_implementations_frame_is_the_innermost_outside_python_torch_and_kvfuzz():
    user = "/home/someone/mypkg/pool.py"
    log = "\n".join([
        "Fatal Python error: Segmentation fault", "", "Stack (most recent call first):",
        _frame(ctypes.__file__, 519, "string_at"),
        _frame(Path(torch.__file__).parent / "_tensor.py", 40, "wrapped"),
        _frame(user, 12, "merge"),
        _frame(user, 30, "free"),
        _frame(ENGINE / "transcript.py", 134, "_answer"),
        _frame(ENGINE / "remote.py", 180, "__call__"),
        _frame(threading.__file__, 1000, "run"), "",
        "Extension modules: torch._C (total: 1)"])
    site = site_of(log, step=7)
    assert site.frame == f"{user}:12 in merge"
    assert site.frames[0] == "ctypes/__init__.py:519 in string_at"  # short: under sys.path
    assert site.frames[-1] == f"{user}:30 in free" and site.outer == 3  # kvfuzz's, calling it
    assert site.step == 7
    assert site_of("nothing useful\x00\xff") == site_of("")  # a process's text, only shown


def test_a_crash_report_says_where_and_its_file_keeps_it(tmp_path):
    target = TARGETS["allocator"]
    impl = target.catalogue.resolve("allocator.torch")
    item = target.generator.generate(0, 0, [impl])
    site = site_of("\n".join([_frame("/src/mypkg/pool.py", 9, "merge"),
                              _frame(ENGINE / "lockstep.py", 1, "step")]), step=3)
    divergence = crash_outcome(target, item, impl, "crashed: SIGSEGV", "SIGSEGV", site).divergence
    report = divergence.report()
    assert f"  op        3 of {len(item.ops)}: " in report
    assert "  at        /src/mypkg/pool.py:9 in merge  (the implementation's innermost" in report
    assert "  stack     ... and 1 outer frames (kvfuzz's, calling it)" in report
    assert divergence.step == 3  # shrinking cuts after the op it crashed in
    path = corpus.save(target, divergence.saved_input(), tmp_path)
    assert path.name == target.file_name(item)  # the note is not content
    note = json.loads(path.read_text())["note"]
    assert note.splitlines()[0] == "crashed: SIGSEGV" and "at /src/mypkg/pool.py:9" in note
    again = corpus.load(path)[1]
    assert again.ops == item.ops
    shown = crash_outcome(target, again, impl, "crashed: SIGSEGV", "SIGSEGV").divergence.report()
    assert "  trace     " in shown and shown.count("crashed: SIGSEGV") == 2  # note's first line


@pytest.mark.slow  # runs kvfuzz's workers
def test_a_segfault_and_a_hang_report_their_stacks_and_replay_says_it_again(tmp_path):
    segfault, hangs = "tests.engine.hostile:segfault", "tests.engine.hostile:hangs"
    ran = kvfuzz_here("diff", "extend", "--impl", segfault, "--impl", hangs, "--cases", 20,
                      "--timeout", 2, "--corpus", tmp_path)
    assert ran.returncode == 1, ran.stderr
    reports = ran.stderr.split("DIVERGENCE  ")[1:]
    crashed = next(r for r in reports if "crashed: SIGSEGV" in r)
    assert re.search(rf"  at        {HOSTILE}:\d+ in <lambda>  \(the implementation's", crashed)
    assert "  stack     ctypes/__init__.py:" in crashed, crashed
    hung = next(r for r in reports if "timed out after 2 s" in r)
    assert re.search(rf"  at        {HOSTILE}:\d+ in <lambda>", hung), hung  # where it hung
    saved = re.search(r"replay    kvfuzz replay (\S+) --impl " + segfault, crashed)[1]
    assert f"at {HOSTILE}:" in json.loads(Path(saved).read_text())["note"]
    again = kvfuzz_here("replay", saved, "--impl", segfault)
    assert again.returncode == 1 and f"  at        {HOSTILE}:" in again.stdout, again.stdout


@pytest.mark.slow  # runs kvfuzz's workers
@pytest.mark.parametrize("hostile", ["tests.engine.hostile:SegfaultsOnMerge",
                                     "tests.engine.hostile_import.takes_sigsegv:SegfaultsOnMerge"])
def test_a_trace_that_crashes_names_its_op_and_shrinks_to_end_there(hostile, tmp_path):
    ran = kvfuzz_here("diff", "allocator", "--impl", hostile, "--cases", 10, "--corpus",
                      tmp_path)
    assert ran.returncode == 1, ran.stderr
    report = ran.stderr.split("DIVERGENCE  ")[1]
    assert "what      crashed: SIGSEGV" in report
    op = re.search(r"  op        (\d+) of (\d+): ", report)
    assert op and int(op[1]) == int(op[2]) - 1, report  # the shrunk trace ends at the crash
    assert re.search(rf"  at        {HOSTILE}:\d+ in merge_and_sort_free", report), report
