"""The released engines in kvfuzz's own cache (`kvfuzz.impl.upstream_cache`): a fetch installs
the lock's pins with pip into a folder named after the lock's hash, atomically (a failed fetch
leaves no folder, and says why in one line); the folder goes on `sys.path` after everything
else; `kvfuzz diff --upstream` runs the released classes beside kvfuzz's own, and without them
(no registry) says so in one line and runs kvfuzz's own. pip is replaced by a fake here: the
real fetch is what CI does (`.ci/run`: `kvfuzz upstream fetch`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvfuzz.impl import upstream_cache
from kvfuzz.impl.registry import Implementation
from tests.helpers import kvfuzz_here, needs_engine, summary_rows


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache and a small lock of its own."""
    lock = tmp_path / "upstream.lock"
    lock.write_text("# a lock\nsglang==0.5.23\nvllm==0.33.0\ntiny==1.0\n")
    monkeypatch.setattr(upstream_cache, "LOCK", lock)
    monkeypatch.setenv("KVFUZZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KVFUZZ_UPSTREAM", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path


def fake_pip(status: int, message: str = ""):
    """subprocess.run standing in for pip: writes a module into --target, then exits."""
    def run(command, stdout, stderr):
        target = command[command.index("--target") + 1]
        assert command[command.index("-r") + 1] == str(upstream_cache.LOCK)
        assert "--no-deps" in command  # never a resolver: no CUDA torch through a dependency
        (upstream_cache.Path(target) / "tiny.py").write_text("VALUE = 7\n")
        stdout.write(message)
        return subprocess.CompletedProcess(command, status)
    return run


def test_a_fetch_installs_the_pins_into_a_folder_named_after_the_lock(cache, monkeypatch):
    monkeypatch.setattr(upstream_cache.subprocess, "run", fake_pip(0))
    lines = []
    folder = upstream_cache.fetch(lines.append)
    assert folder.name.startswith("sglang-0.5.23+vllm-0.33.0-") and folder.is_dir()
    assert upstream_cache.fetched() and sys.path[-1] == str(folder)
    assert len(lines) == 1 and "fetching sglang==0.5.23 and vllm==0.33.0" in lines[0]
    import tiny  # noqa: F401  (importable from the cache once fetched)

    assert tiny.VALUE == 7
    del sys.modules["tiny"]
    assert upstream_cache.fetch(lines.append) == folder and len(lines) == 1  # once
    upstream_cache.LOCK.write_text(upstream_cache.LOCK.read_text() + "other==2\n")
    assert upstream_cache.folder() != folder and not upstream_cache.fetched()  # a new pin


def test_a_failed_fetch_leaves_nothing_and_says_why_in_one_line(cache, monkeypatch):
    monkeypatch.setattr(upstream_cache.subprocess, "run", fake_pip(
        1, "WARNING: Location 'x' is ignored\nERROR: Could not find a version that satisfies "
           "the requirement vllm==0.33.0\n"))
    with pytest.raises(upstream_cache.FetchError) as error:
        upstream_cache.fetch()
    message = str(error.value)
    assert "\n" not in message and "Could not find a version" in message, message
    assert not upstream_cache.fetched() and not upstream_cache.activate()
    leftovers = [p.name for p in upstream_cache.folder().parent.iterdir()]
    assert all(name.endswith(".log") for name in leftovers), leftovers  # the log, kept


def test_the_cache_goes_after_every_other_path_and_can_be_turned_off(cache, monkeypatch):
    monkeypatch.setattr(upstream_cache.subprocess, "run", fake_pip(0))
    first = list(sys.path)
    folder = upstream_cache.fetch()
    assert sys.path == first + [str(folder)]
    sys.path.remove(str(folder))
    monkeypatch.setenv("KVFUZZ_UPSTREAM", "off")
    assert not upstream_cache.activate() and str(folder) not in sys.path


def test_upstream_where_names_the_folder(cache):
    ran = kvfuzz_here("upstream", "where")
    assert ran.returncode == 0 and str(upstream_cache.folder()) in ran.stdout
    assert "not fetched" in ran.stdout


@needs_engine("sglang")[0]
@pytest.mark.slow  # imports SGLang
def test_diff_upstream_runs_the_released_functions_beside_ours(tmp_path):
    ran = kvfuzz_here("diff", "decode", "--upstream", "--cases", "50", "--corpus", tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert {"torch.vectorized", "sglang.naive"} <= set(summary_rows(ran.stderr))


def test_diff_upstream_without_a_registry_runs_ours_and_says_why(cache, monkeypatch, tmp_path):
    monkeypatch.setattr(upstream_cache, "installed", lambda: False)
    monkeypatch.setattr(upstream_cache.subprocess, "run", fake_pip(
        1, "ERROR: Could not find a version that satisfies the requirement sglang==0.5.23\n"))
    real = Implementation.available
    monkeypatch.setattr(Implementation, "available",  # as on a machine without the engines
                        lambda self: self.requires is None and real(self))
    ran = kvfuzz_here("diff", "decode", "--upstream", "--cases", "30", "--corpus", tmp_path)
    assert ran.returncode == 0, ran.stderr
    warning = [line for line in ran.stderr.splitlines() if "--upstream" in line]
    assert len(warning) == 1 and "Could not find a version" in warning[0], ran.stderr
    assert "running kvfuzz's own implementations only" in warning[0]
    rows = summary_rows(ran.stderr)
    assert "torch.vectorized" in rows and "sglang.naive" not in rows
