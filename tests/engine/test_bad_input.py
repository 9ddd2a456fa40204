"""Bad files and bad places, as a user hands them over: every bad file of a directory is named in
one line while the good ones still replay, nothing that is not a regular file is read, a finding
the disk refuses is printed instead of lost, and no input file under 1 MB takes 1 GB."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.cli.main import main
from kvfuzz.fuzz.targets import EXTEND, TARGETS
from tests.helpers import kvfuzz_here

ROOT = Path(__file__).resolve().parents[2]
GOOD = sorted((ROOT / "corpus").glob("decode-*.json"))[:2]


def test_replaying_a_directory_names_every_bad_file_and_replays_the_good_ones(tmp_path):
    for path in GOOD:
        shutil.copy(path, tmp_path)
    (tmp_path / "broken.json").write_text("{oops")
    os.mkfifo(tmp_path / "pipe.json")               # would block a plain open forever
    (tmp_path / "zero.json").symlink_to("/dev/zero")  # would never end
    (tmp_path / "dir.json").mkdir()
    with open(tmp_path / "huge.json", "wb") as handle:
        handle.truncate(corpus.MAX_FILE_BYTES + 1)
    result = kvfuzz_here("replay", tmp_path)
    assert result.returncode == 2, result.stderr
    bad = result.stderr.strip().splitlines()
    assert len(bad) == 5 and all(line.startswith("kvfuzz: error: ") for line in bad), bad
    for name in ("broken", "pipe", "zero", "dir", "huge"):
        assert sum(f"{name}.json" in line for line in bad) == 1, bad
    assert result.stdout.count("ok ") == 3 * len(GOOD)  # three bundled decode implementations
    assert "5 bad file(s) not replayed" in result.stdout


def test_an_implementation_of_one_target_replays_a_mixed_corpus(tmp_path):
    result = kvfuzz_here("replay", ROOT / "corpus", "--impl", "mutant.no_clamp")
    assert result.returncode == 1, result.stderr  # it diverges on an extend case
    others = Counter(path.name.split("-")[0] for path in (ROOT / "corpus").rglob("*.json")
                     if not path.name.startswith("extend-"))
    listed = ", ".join(f"{name} {count}" for name, count in sorted(others.items()))
    assert f"skipped {sum(others.values())} file(s) of targets no --impl applies to: " \
           f"{listed}" in result.stdout


@pytest.mark.parametrize("place", ["file", "under a file"])
def test_an_unwritable_corpus_is_refused_before_anything_runs(place, tmp_path):
    blocker = tmp_path / "plain"
    blocker.write_text("")
    where = blocker if place == "file" else blocker / "sub"
    result = kvfuzz_here("diff", "extend", "--impl", "mutant.owner_left_bisect", "--corpus", where)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "cannot write there" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


def test_a_finding_the_disk_refuses_is_printed_not_lost(tmp_path, monkeypatch):
    def full_disk(path, content):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(corpus, "write_atomic", full_disk)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["diff", "extend", "--impl", "mutant.owner_left_bisect", "--cases", "50",
                       "--corpus", str(tmp_path)])
    assert status == 1
    text = err.getvalue()
    assert "cannot save to" in text and "No space left on device" in text
    start = text.index('{\n "format": "kvfuzz-case/1"')
    printed = corpus.loads(text[start:text.index("\n}\n", start) + 2], "stderr")
    assert printed[0] is EXTEND
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def refuse(source, destination):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        corpus.save(EXTEND, EXTEND.generator.generate(0, 0), tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_saved_files_honour_the_umask(umask, mode, tmp_path):
    previous = os.umask(umask)
    try:
        path = corpus.save(EXTEND, EXTEND.generator.generate(0, 0), tmp_path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == mode


def _worst_cases(tmp_path: Path) -> list[Path]:
    """Every target's input under 1 MB at its format's limits (`Target.worst_input`): a target
    cannot join the table without one."""
    cases = {name: target.codec.worst_input() for name, target in TARGETS.items()}
    paths = []
    for name, data in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        assert path.stat().st_size < 2**20
        paths.append(path)
    return paths


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_targets_worst_input_loads_and_is_under_1_mb(name):
    text = json.dumps(TARGETS[name].codec.worst_input())
    assert len(text.encode()) < 2**20
    assert corpus.loads(text, f"{name}.json")[0] is TARGETS[name]


PEAK = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


# A second tree of SGLang's over the same file: the same format read by the same supervisor and
# the same released package imported in its worker; measured at c063c08, each peaked within
# 0.1 MB of its sibling's (radix 425.7 MB, unified 462.2 MB) and took some 10 CPU s more.
SECOND_TREES = {"sglang.radix.pure_swa", "sglang.unified.python"}


def _impl_args() -> list[str]:
    """`--impl` for every bundled implementation of every target but `SECOND_TREES`."""
    names = dict.fromkeys(impl.name for target in TARGETS.values()
                          for impl in target.catalogue.defaults())
    return [arg for name in names if name not in SECOND_TREES for arg in ("--impl", name)]


def _replay_peak(path: Path) -> tuple[int, str, int]:
    """(exit status, stdout, peak RSS in kB of the largest process) of a `kvfuzz replay` of
    `path` (a file, or a folder of them) on the bundled implementations (`_impl_args`), a
    process of its own."""
    done = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "kvfuzz.fuzz.cli",
                           "replay", str(path), "--timeout", "60", *_impl_args()],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    *out, last = done.stdout.strip().splitlines()
    status, peak_kb = map(int, last.split())
    return status, "\n".join(out), peak_kb


@pytest.mark.slow  # one kvfuzz process replaying every target's worst input
def test_no_input_file_under_1_mb_takes_1_gb(tmp_path):
    """One replay of all targets' worst inputs (one kvfuzz start-up, not one per target): its
    largest process, the supervisor reading every file included, stays under 1 GB, so each
    file's does. Over it, each file is replayed alone to name the ones that take it. Every
    bundled implementation runs but a second SGLang tree over the same file (`SECOND_TREES`)."""
    paths = _worst_cases(tmp_path)
    status, out, peak_kb = _replay_peak(tmp_path)
    # every file was read and run (a replay that ended early would peak low for nothing)
    assert status in (0, 1) and f"replayed {len(paths)} file(s)" in out, out[-3000:]
    if peak_kb >= 2**20:
        over = {path.name: kb for path in paths if (kb := _replay_peak(path)[2]) >= 2**20}
        pytest.fail(f"peak RSS {peak_kb / 1024:.0f} MB replaying every worst input; alone: "
                    + (", ".join(f"{name} {kb / 1024:.0f} MB" for name, kb in over.items())
                       or "none over 1 GB"))
