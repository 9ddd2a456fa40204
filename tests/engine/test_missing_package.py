"""A target whose implementations all need a package that is not installed (blockpool and
kvmanager: vLLM) is said, not failed: `kvfuzz diff` of every target skips it in one line and
exits 0, naming it alone (`kvfuzz diff`, `kvfuzz fuzz`, `kvfuzz.diff`) is a one-line usage error,
and `kvfuzz replay` reports its files as not run. The package's absence is simulated, so this
runs with vLLM installed too."""

from __future__ import annotations

import contextlib
import io
import shutil

import pytest

from kvfuzz.fuzz.cli.main import main
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import Implementation
from tests.conftest import CORPUS

# Targets whose bundled implementations all need vllm (blockpool, kvmanager).
VLLM_ONLY = sorted(name for name, target in TARGETS.items()
                   if all(impl.requires == "vllm" for impl in target.catalogue.implementations
                          if impl.runs_by_default))

NOT_RUN = ("its implementations need vllm, which is not installed (kvfuzz upstream fetch puts "
           "the pinned release in kvfuzz's cache; docs/upstream-vllm.md)")


@pytest.fixture
def without_vllm(monkeypatch):
    real = Implementation.available
    monkeypatch.setattr(Implementation, "available",
                        lambda self: self.requires != "vllm" and real(self))


def run(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return status, out.getvalue(), err.getvalue()


def test_bundled_leaves_out_what_is_not_installed(without_vllm):
    assert {"blockpool", "kvmanager"} <= set(VLLM_ONLY)
    assert all(TARGETS[name].catalogue.defaults() == []
               and TARGETS[name].catalogue.not_run_reason() == NOT_RUN
               for name in VLLM_ONLY)
    assert all(TARGETS[name].catalogue.defaults()
               and TARGETS[name].catalogue.not_run_reason() is None
               for name in TARGETS if name not in VLLM_ONLY)


# slow: a diff of every target starts their workers, whose fork servers import SGLang for the
# prefix caches (20 s of the quick tier's wall and some 30 CPU s in its grandchildren, 2026-12-07)
@pytest.mark.slow
def test_diff_of_every_target_says_blockpool_is_not_run_and_passes(without_vllm, tmp_path):
    status, _, err = run("diff", "--cases", "2", "--corpus", str(tmp_path))
    assert status == 0, err
    assert all(f"{name}: not run: {NOT_RUN}" in err.splitlines() for name in VLLM_ONLY)
    assert all(f"summary: {name}" in err for name in TARGETS if name not in VLLM_ONLY)
    assert "summary: blockpool" not in err and "Traceback" not in err


def test_diff_of_blockpool_alone_is_a_one_line_error(without_vllm, tmp_path):
    status, out, err = run("diff", "blockpool", "--cases", "2", "--corpus", str(tmp_path))
    assert status == 2 and out == ""
    assert err.strip() == f"kvfuzz: error: target blockpool: not run: {NOT_RUN}"
    assert list(tmp_path.iterdir()) == []


def test_replay_reports_blockpool_files_as_not_run_and_replays_the_rest(without_vllm, tmp_path):
    for pattern in ("blockpool-*.json", "mamba-*.json"):
        for path in sorted(CORPUS.glob(pattern))[:2]:
            shutil.copy(path, tmp_path)
    status, out, err = run("replay", str(tmp_path))
    assert status == 0, out + err
    assert f"not run: 2 blockpool file(s): {NOT_RUN}" in out.splitlines()
    assert out.count("ok ") == 2 and "blockpool-" not in out.replace("blockpool file", "")
    assert "replayed 2 file(s): no divergence" in out


@pytest.mark.parametrize("command", ["diff", "fuzz"])
def test_naming_kvmanager_alone_is_a_one_line_error(without_vllm, tmp_path, command):
    status, out, err = run(command, "kvmanager", "--corpus", str(tmp_path / "found"),
                           *(["--work", str(tmp_path / "work"), "--time", "2s"]
                             if command == "fuzz" else ["--cases", "2"]))
    assert status == 2 and out == ""
    assert err.strip() == f"kvfuzz: error: target kvmanager: not run: {NOT_RUN}"


def test_the_python_api_says_why_nothing_runs(without_vllm):
    import kvfuzz

    with pytest.raises(ValueError, match="target blockpool: not run: its implementations need "
                                         "vllm"):
        kvfuzz.diff("blockpool", cases=1)
