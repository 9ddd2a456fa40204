"""`bench/upstream_tests.py`, the runner of upstream's own tests that `kvfuzz mutate --also-run`
is given: on a fake sdist, `--record` lists the tests that fail on the release and a run then
deselects them (only tests that pass on the release count); the overlay's PYTHONPATH stays first."""

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
'''


@pytest.fixture
def sdist(tmp_path, monkeypatch):
    root = tmp_path / "fake-1.0"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_fake.py").write_text(TESTS)
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


def test_node_ids_of_functions_and_of_class_tests(tmp_path):
    (tmp_path / "test" / "unit").mkdir(parents=True)
    (tmp_path / "test" / "unit" / "test_pool.py").write_text("")
    assert upstream_tests.node_id(tmp_path, "test.unit.test_pool", "test_a") == \
        "test/unit/test_pool.py::test_a"
    assert upstream_tests.node_id(tmp_path, "test.unit.test_pool.TestPool", "test_a") == \
        "test/unit/test_pool.py::TestPool::test_a"


def test_failing_tests_are_recorded_then_deselected(sdist, capsys):
    assert upstream_tests.main([str(sdist), "tests/test_fake.py", "--record"]) == 0
    assert upstream_tests.read_failing(sdist) == ["tests/test_fake.py::test_fails_on_the_release"]
    assert "1 passed, 1 failing" in capsys.readouterr().out
    assert upstream_tests.main([str(sdist), "tests/test_fake.py"]) == 0


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
    """junit names a class's test `module.Class` / `name`: the node id is `file::Class::name`."""
    (sdist / "tests" / "unit").mkdir()
    (sdist / "tests" / "unit" / "test_pool.py").write_text(UNITTEST_CLASS)
    assert upstream_tests.main([str(sdist), "tests/unit/test_pool.py", "--record"]) == 0
    assert upstream_tests.read_failing(sdist) == [
        "tests/unit/test_pool.py::TestPool::test_fails_on_the_release"]
    assert upstream_tests.main([str(sdist), "tests/unit/test_pool.py"]) == 0
