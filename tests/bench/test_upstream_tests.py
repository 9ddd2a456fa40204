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


def test_the_overlay_stays_first_on_the_path(sdist, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/overlay")
    parts = upstream_tests.environment()["PYTHONPATH"].split(":")
    assert parts == ["/overlay", str(sdist.parent / "engines"), "."]


def test_failing_tests_are_recorded_then_deselected(sdist, capsys):
    assert upstream_tests.main([str(sdist), "tests/test_fake.py", "--record"]) == 0
    assert upstream_tests.read_failing(sdist) == ["tests/test_fake.py::test_fails_on_the_release"]
    assert "1 passed, 1 failing" in capsys.readouterr().out
    assert upstream_tests.main([str(sdist), "tests/test_fake.py"]) == 0


def test_no_sdist_is_one_usage_line(tmp_path, capsys):
    assert upstream_tests.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
