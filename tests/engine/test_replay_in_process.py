"""`kvfuzz replay FILE --in-process` runs one input in this process, without isolation: an
implementation's exception is printed with its whole traceback, `--pdb` opens pdb post mortem
where it raised, and a crash ends the process with faulthandler's stack. Bad usage is one line
and status 2."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.targets import TARGETS
from tests.helpers import double, kvfuzz_here

ROOT = Path(__file__).resolve().parents[2]
# mutant.no_clamp indexes past the free pages on this case (a shrunk find)
CASE = ('{"format": "kvfuzz-case/1", "target": "extend", "page_size": 2, "prefix_lens": [0, 1],'
        ' "seq_lens": [1, 2], "last_loc": [-1, 2], "free_pages": [2]}')


@pytest.fixture
def case_file(tmp_path) -> Path:
    path = tmp_path / "case.json"
    path.write_text(CASE)
    return path


def _trace_file(tmp_path, hostile: str) -> Path:
    """The first seeded allocator trace on which `hostile` diverges, saved."""
    target = TARGETS["allocator"]
    impl = double("allocator", f"tests.engine.hostile:{hostile}")
    item = next(item for item in (target.generator.generate(0, i, [impl]) for i in range(50))
                if target.check(item, impl).divergence is not None)
    return corpus.save(target, item, tmp_path)


def test_a_raise_is_printed_with_its_whole_traceback(case_file):
    ran = kvfuzz_here("replay", case_file, "--impl", "mutant.no_clamp", "--in-process")
    assert ran.returncode == 1, ran.stderr
    assert "DIVERGENCE  extend  implementation mutant.no_clamp" in ran.stdout
    whole = ran.stdout.split("the whole traceback, in this process:")[1]
    assert "Traceback (most recent call last):" in whole
    assert 'impl/paged/mutants.py", line' in whole and 'three_phase.py", line' in whole
    assert whole.rstrip().endswith("IndexError: index 1 is out of bounds for dimension 0 with "
                                   "size 1")


def test_a_trace_targets_raise_is_traced_to_the_implementations_line(tmp_path):
    path = _trace_file(tmp_path, "RaisesOnMerge")
    ran = kvfuzz_here("replay", path, "--impl", "tests.engine.hostile:RaisesOnMerge",
                      "--in-process")
    assert ran.returncode == 1 and "what      crash at op" in ran.stdout, ran.stdout
    whole = ran.stdout.split("the whole traceback, in this process:")[1]
    assert 'hostile.py", line' in whole and "in merge_and_sort_free" in whole
    assert "RuntimeError: refusing to merge" in whole


def test_pdb_opens_post_mortem_where_the_implementation_raised(case_file, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("p index2\nq\n"))
    ran = kvfuzz_here("replay", case_file, "--impl", "mutant.no_clamp", "--pdb")
    assert ran.returncode == 1
    debugger = ran.stdout.split("IndexError: index 1 is out of bounds")[-1]
    assert "three_phase.py(54)phase_values()" in debugger and "(Pdb) " in debugger
    assert "tensor([" in debugger  # `p index2` ran in the implementation's frame


def test_pdb_says_so_when_nothing_was_raised(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("q\n"))
    path = _trace_file(tmp_path, "NestedResults")  # right slots in a 2-D tensor: no raise
    ran = kvfuzz_here("replay", path, "--impl", "mutant.allocator.padding_page", "--pdb")
    assert ran.returncode == 1 and "raised nothing (a wrong answer" in ran.stdout, ran.stdout
    assert "(Pdb)" not in ran.stdout


@pytest.mark.parametrize("args, expected", [
    (["corpus"], "--in-process runs one input: corpus holds"),
    (["{case}", "{case}", "--pdb"], "--pdb runs one input"),
    (["/nonexistent.json"], "/nonexistent.json: no such file"),
    (["{case}", "--impl", "allocator.torch"], "'allocator.torch' for target 'extend'")])
def test_bad_usage_is_one_line_and_status_2(args, expected, case_file):
    args = [arg.format(case=case_file) for arg in args]
    ran = kvfuzz_here("replay", *args, *(["--in-process"] if "--pdb" not in args else []))
    assert ran.returncode == 2 and expected in ran.stderr, ran.stderr
    assert len(ran.stderr.splitlines()) == 1 and "Traceback" not in ran.stderr


@pytest.mark.slow  # the crash ends a kvfuzz process of its own
def test_a_crash_in_process_ends_it_with_the_stack(case_file, tmp_path):
    three = tmp_path / "three.json"  # the hostile double misbehaves on three requests or more
    three.write_text(CASE.replace('[0, 1]', '[0, 0, 0]').replace('[1, 2]', '[0, 0, 0]')
                     .replace('[-1, 2]', '[-1, -1, -1]'))
    ran = subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", "replay", three, "--impl",
                          "tests.engine.hostile:segfault", "--in-process"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == -11, ran.stderr
    assert "Fatal Python error: Segmentation fault" in ran.stderr
    assert 'tests/engine/hostile.py", line' in ran.stderr
