"""`bench/upstream_tests.py`, the runner of upstream's own tests that `kvfuzz mutate --also-run`
is given: on a fake sdist, `--record` lists the tests that fail on the release and a run then
deselects them (only tests that pass on the release count), recording one file keeps the
others' entries (a mutant that overwrites the list is caught), node ids of tests in classes are
pytest's own, a file that cannot be collected is ignored; the overlay's PYTHONPATH stays first."""

from __future__ import annotations

import pytest

from kvfuzz.bench import upstream_tests
from kvfuzz.impl import upstream_cache

pytestmark = pytest.mark.slow  # it runs pytest as a process of its own

TESTS = '''
def test_passes():
    assert True

def test_fails_on_the_release():
    assert False

class TestInAClass:
    def test_fails_too(self):
        assert False
'''


@pytest.fixture
def sdist(tmp_path, monkeypatch):
    root = tmp_path / "fake-1.0"
    (root / "tests").mkdir(parents=True)
    for name in ("test_fake.py", "test_other.py"):
        (root / "tests" / name).write_text(TESTS)
    (root / "tests" / "sub").mkdir()
    (root / "tests" / "sub" / "test_broken.py").write_text("import no_such_module\n")
    (root / "tests" / "sub" / "test_fine.py").write_text("def test_fine():\n    pass\n")
    monkeypatch.setattr(upstream_tests, "HERE", tmp_path / "lists")
    monkeypatch.setattr(upstream_cache, "fetched", lambda: True)
    monkeypatch.setattr(upstream_cache, "folder", lambda: tmp_path / "engines")
    monkeypatch.setenv("KVFUZZ_UPSTREAM", "off")  # no engine in the child: no torch imported
    return root


@pytest.mark.parametrize("datasets", [True, False])
def test_the_overlay_stays_first_on_the_path(sdist, monkeypatch, datasets):
    """... and the `datasets` stand-in goes last, only where no `datasets` is installed."""
    monkeypatch.setenv("PYTHONPATH", "/overlay")
    monkeypatch.setattr(upstream_tests, "_installed", lambda name: datasets)
    parts = upstream_tests.environment()["PYTHONPATH"].split(":")
    assert parts == ["/overlay", str(sdist.parent / "engines"), "."] + \
        ([] if datasets else [str(upstream_tests.STAND_INS)])


def test_a_repository_test_folder_is_a_root(sdist):
    """SGLang's tests live in its repository's `test/`, not an sdist's `tests/`."""
    repo = sdist.parent / "repo"
    (repo / "test").mkdir(parents=True)
    (repo / "test" / "test_fake.py").write_text(TESTS.split("def test_fails")[0])
    assert upstream_tests.main([str(repo), "test/test_fake.py"]) == 0


def test_failing_tests_are_recorded_then_deselected(sdist, capsys):
    assert upstream_tests.main([str(sdist), "tests/test_fake.py", "--record"]) == 0
    assert upstream_tests.read_failing(sdist) == [
        "tests/test_fake.py::TestInAClass::test_fails_too",
        "tests/test_fake.py::test_fails_on_the_release"]
    assert "1 passed, 2 failing" in capsys.readouterr().out
    assert upstream_tests.main([str(sdist), "tests/test_fake.py"]) == 0


def assert_recording_merges_per_file(sdist) -> None:
    """Recording one file, then another, keeps the first's entries; re-recording the first once
    it passes drops its entries and keeps the second's."""
    upstream_tests.main([str(sdist), "tests/test_fake.py", "--record"])
    upstream_tests.main([str(sdist), "tests/test_other.py", "--record"])
    entries, counts = upstream_tests.read_list(upstream_tests.failing_list(sdist))
    assert {upstream_tests.file_of(e) for e in entries} == {"tests/test_fake.py",
                                                            "tests/test_other.py"}, entries
    assert counts == {"tests/test_fake.py": (1, 2), "tests/test_other.py": (1, 2)}, counts
    (sdist / "tests" / "test_fake.py").write_text("def test_passes():\n    pass\n")
    upstream_tests.main([str(sdist), "tests/test_fake.py", "--record"])
    entries, counts = upstream_tests.read_list(upstream_tests.failing_list(sdist))
    assert {upstream_tests.file_of(e) for e in entries} == {"tests/test_other.py"}, entries
    assert counts == {"tests/test_fake.py": (1, 0), "tests/test_other.py": (1, 2)}, counts


def test_recording_one_file_keeps_the_others(sdist):
    assert_recording_merges_per_file(sdist)


def test_a_recorder_that_overwrites_the_list_is_caught(sdist, monkeypatch):
    # the bug this replaced: the list rewritten with the last run's files only
    monkeypatch.setattr(upstream_tests, "covered", lambda file, recorded: True)
    with pytest.raises(AssertionError):
        assert_recording_merges_per_file(sdist)


def test_a_file_that_cannot_be_collected_is_recorded_then_ignored(sdist, capfd):
    assert upstream_tests.main([str(sdist), "tests/sub", "--record"]) == 0
    assert upstream_tests.read_failing(sdist) == ["tests/sub/test_broken.py"]
    assert "1 passed, 1 failing" in capfd.readouterr().out
    assert upstream_tests.main([str(sdist), "tests/sub"]) == 0


def test_recording_a_node_id_is_one_line(sdist, capsys):
    assert upstream_tests.main([str(sdist), "tests/test_fake.py::test_passes", "--record"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_no_sdist_is_one_usage_line(tmp_path, capsys):
    assert upstream_tests.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


UNITTEST_CLASS = '''
import unittest

class TestPool(unittest.TestCase):
    def test_passes(self):
        pass

    def test_fails_on_the_release(self):
        self.fail("on the release")
'''


def test_a_unittest_class_test_is_recorded_by_its_node_id(sdist, capsys):
    """A unittest class's test is recorded as `file::Class::name` (junit's `module.Class` lost
    the file: `file/Class.py::name`, which deselects nothing)."""
    (sdist / "tests" / "unit").mkdir()
    (sdist / "tests" / "unit" / "test_pool.py").write_text(UNITTEST_CLASS)
    assert upstream_tests.main([str(sdist), "tests/unit/test_pool.py", "--record"]) == 0
    assert upstream_tests.read_failing(sdist) == [
        "tests/unit/test_pool.py::TestPool::test_fails_on_the_release"]
    assert upstream_tests.main([str(sdist), "tests/unit/test_pool.py"]) == 0


def test_an_option_s_value_stays_with_it(sdist, capfd):
    """`-k EXPR` passes through to pytest whole (a word that is no path of the sdist is not
    taken for a test file)."""
    assert upstream_tests.main([str(sdist), "tests/test_fake.py", "-k", "test_passes"]) == 0
    assert "1 passed, 2 deselected" in capfd.readouterr().out


def test_only_a_repository_root_gets_the_cpu_device(sdist):
    """SGLang's tests (a repository's `test/`) get the plugin's CPU answer of get_device();
    vLLM's sdist does not (its tests never ask)."""
    repo = sdist.parent / "repo"
    (repo / "test").mkdir(parents=True)
    assert upstream_tests.environment(repo).get(upstream_tests.CPU_DEVICE) == "1"
    assert upstream_tests.CPU_DEVICE not in upstream_tests.environment(sdist)


def test_get_device_answers_cpu_only_where_it_would_raise(monkeypatch):
    """The stand-in keeps every answer the release gives and turns only its no-accelerator
    error into "cpu" (fake modules: no SGLang needed)."""
    import sys
    import types

    answers = {"device": RuntimeError("No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) ...")}

    def released(device_id=None):
        if isinstance(answers["device"], Exception):
            raise answers["device"]
        return answers["device"]

    modules = {name: types.ModuleType(name) for name in
               ("sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.utils.common")}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(modules[parent], leaf, module)
    utils, common = modules["sglang.srt.utils"], modules["sglang.srt.utils.common"]
    utils.get_device = common.get_device = released
    upstream_tests._cpu_when_no_accelerator()
    assert utils.get_device() == common.get_device() == "cpu"
    answers["device"] = "cuda:0"
    assert utils.get_device(0) == "cuda:0"
