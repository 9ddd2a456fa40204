"""`kvfuzz history` for real (slow): an older SGLang release (0.5.10, a 6 MB wheel) installed
apart in kvfuzz's cache and its token allocator run as a cell, in a process of its own as a user
runs it. 0.5.10's `free` inside a free group keeps the caller's tensor (finding B of
`docs/release-history.md`), which the pinned release fixed: the cell diverging there is what
shows that the release's folder, not the pinned engine, ran. After the cell, the release's
saved findings (`corpus/history/sglang-0.5.10/`: B and C as 0.5.10 shipped them) replay on the
class there and still diverge; `test_corpus_replay.py` replays corpus/ whole on the pinned
release, where they pass. A rerun resumes: nothing runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvfuzz.fuzz.history import releases
from kvfuzz.fuzz.history.releases import Release
from tests.conftest import CORPUS
from tests.helpers import kvfuzz_here, needs_engine, with_engine

pytestmark = needs_engine("sglang")  # the lock's other packages, which the release imports

OLD = Release("sglang", "0.5.10")
OLD_VLLM = Release("vllm", "0.27.0")  # a 313 MB wheel, 775 MB installed


def _install(release):
    try:
        return releases.install(release)
    except releases.ReleaseError as error:  # no registry here: said, not failed
        pytest.skip(f"cannot install {release}: {error}")


@pytest.fixture(scope="module")
def installed():
    return _install(OLD)


def test_an_older_release_runs_apart_and_its_finding_is_kept(installed, tmp_path):
    results = tmp_path / "history" / "results.jsonl"
    argv = ["--sglang", OLD.version, "--impl", "sglang.token", "--cases", "2",
            "--results", str(results), "--json", str(tmp_path / "table.json"),
            "--findings", str(CORPUS / "history")]
    done = subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", "history", *argv],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[1/1] sglang 0.5.10 allocator/sglang.token: diverges: " in done.stderr
    cell, = json.loads((tmp_path / "table.json").read_text())["cells"]
    result = cell["result"]
    assert result["status"] == "diverges" and result["folder"] == str(installed)
    assert any("group end" in finding["what"] for finding in result["findings"])
    for finding in result["findings"]:  # saved beside the results, named in the table
        assert (tmp_path / "history" / "corpus" / "sglang-0.5.10").samefile(
            __import__("pathlib").Path(finding["file"]).parent)
        assert f"PYTHONPATH={installed} {finding['replay']}" in done.stdout
    replayed = result["replayed"]  # every saved finding of the release, on its class
    assert replayed["files"] == sorted(p.name for p in (CORPUS / "history" / "sglang-0.5.10")
                                       .glob("allocator-*.json")) and len(replayed["files"]) == 2
    assert [o["result"] for o in replayed["outcomes"]] == ["still diverges"] * 2
    whats = " ".join(o["what"] for o in replayed["outcomes"])
    assert "group end" in whats and "group_begin_nested" in whats  # B and C
    assert "2 saved findings: 2 still diverge" in done.stderr and "DIVERGES*" in done.stdout
    assert results.with_suffix(".png").exists() or "no picture" in done.stderr
    again = kvfuzz_here("history", *argv)  # resumed: the cell is done, nothing runs
    assert again.returncode == 0 and "1 cells (1 done before" in again.stderr
    assert "[1/1]" not in again.stderr and "DIVERGES" in again.stdout


@with_engine("vllm")
def test_an_older_vllm_release_runs_apart_and_its_finding_still_diverges_there(tmp_path):
    # vLLM 0.27.0's BlockPool frees blocks to the queue's tail with caching off (finding H); its
    # saved file (corpus/history/vllm-0.27.0/) diverges on 0.27's class, replayed by the cell,
    # and passes on the pinned release (test_corpus_replay.py). One cell of 2 traces.
    folder = _install(OLD_VLLM)
    argv = ["--vllm", OLD_VLLM.version, "--impl", "vllm.blockpool", "--cases", "2",
            "--results", str(tmp_path / "results.jsonl"), "--json", str(tmp_path / "table.json"),
            "--findings", str(CORPUS / "history"), "--picture", str(tmp_path / "table.png")]
    done = subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", "history", *argv],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[1/1] vllm 0.27.0 blockpool/vllm.blockpool: " in done.stderr
    cell, = json.loads((tmp_path / "table.json").read_text())["cells"]
    assert cell["result"]["folder"] == str(folder)
    replayed = cell["result"]["replayed"]
    assert replayed["files"] == sorted(p.name for p in (CORPUS / "history" / "vllm-0.27.0")
                                       .glob("blockpool-*.json")) and replayed["files"]
    assert {o["result"] for o in replayed["outcomes"]} == {"still diverges"}
    assert "free queue" in " ".join(o["what"] for o in replayed["outcomes"])
