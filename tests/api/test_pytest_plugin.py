"""The pytest plugin in someone else's project: a throwaway repository in a temporary directory
with its own pyproject.toml, allocator module, corpus and ten-line test file, run by pytest in a
subprocess, once with a correct allocator and once with a planted bug."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test runs pytest in a throwaway project, as a process

from tests.conftest import CORPUS

ALLOCATOR = '''
import os
from kvfuzz.impl.paged.vectorized import alloc_extend as reference


def alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    reference(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device)
    if os.environ.get("PLANT_BUG") and out_indices.shape[0] > 1:
        out_indices[-1] += 1  # the planted bug: the last slot one off
'''
TESTS = '''
from hypothesis import given, settings
import kvfuzz
from mypkg.alloc import alloc_extend

def test_seeded_differential(kvfuzz):
    kvfuzz.assert_agrees("extend", cases=300)

@settings(max_examples=50, deadline=None)
@given(kvfuzz.extend_cases())
def test_property(case):
    kvfuzz.assert_agrees("extend", alloc_extend, case)
'''
PYPROJECT = '''[project]
name = "mypkg"
version = "0"

[tool.pytest.ini_options]
testpaths = ["tests"]
'''
CONFIG = '''
[tool.kvfuzz]
corpus = "corpus"
impl = ["mypkg.alloc:alloc_extend"]
'''
FILES = ("extend-4e57a9ffe9edf812.json", "extend-67b570cb393dbc76.json",
         "decode-a5fc19b83e174be4.json")


def project(root: Path, configured: bool = True) -> Path:
    (root / "mypkg").mkdir()
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "alloc.py").write_text(ALLOCATOR)
    (root / "tests").mkdir()
    (root / "tests" / "test_allocator.py").write_text(TESTS)
    (root / "pyproject.toml").write_text(PYPROJECT + (CONFIG if configured else ""))
    (root / "corpus").mkdir()
    for name in FILES:
        shutil.copy(CORPUS / name, root / "corpus")
    return root


def pytest_in(root: Path, *args, bug: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "PLANT_BUG": "1" if bug else ""}
    env.pop("HYPOTHESIS_PROFILE", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *args],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_a_correct_allocator_passes_and_every_corpus_file_is_an_item(tmp_path):
    result = pytest_in(project(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:]
    for name in FILES[:2]:
        assert f"corpus/{name}::mypkg.alloc:alloc_extend PASSED" in result.stdout
    assert "corpus/decode-a5fc19b83e174be4.json::decode SKIPPED" in result.stdout
    assert "test_seeded_differential PASSED" in result.stdout


def test_a_planted_bug_fails_the_run_with_kvfuzz_reports(tmp_path):
    result = pytest_in(project(tmp_path), bug=True)
    assert result.returncode == 1
    out = result.stdout
    assert "4 failed, 1 skipped" in out, out[-3000:]  # two corpus items, the diff, the property
    assert "DIVERGENCE  extend  implementation mypkg.alloc:alloc_extend" in out
    assert (f"replay    kvfuzz replay {tmp_path}/corpus/extend-4e57a9ffe9edf812.json "
            f"--impl mypkg.alloc:alloc_extend") in out


@pytest.mark.parametrize("bug", [False, True])
def test_the_command_line_options_work_without_configuration(bug, tmp_path):
    root = project(tmp_path, configured=False)
    result = pytest_in(root, "--kvfuzz-corpus", "corpus", "--kvfuzz-impl",
                       "mypkg.alloc:alloc_extend", "-k", "corpus or extend-", bug=bug)
    assert result.returncode == (1 if bug else 0), result.stdout[-3000:]
    assert "extend-67b570cb393dbc76.json::mypkg.alloc:alloc_extend" in result.stdout


def test_without_configuration_the_plugin_changes_nothing(tmp_path):
    root = project(tmp_path, configured=False)
    (root / "tests" / "test_allocator.py").write_text("def test_nothing():\n    pass\n")
    result = pytest_in(root)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-2000:]
