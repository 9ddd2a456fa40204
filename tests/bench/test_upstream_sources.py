"""`bench/upstream_sources.py`: upstream test files that ship in no package (SGLang's) are put in
place from a local copy only when each matches the sha256 its manifest pins; a missing or changed
file, or a malformed manifest, is one line and exit 2, and nothing is copied. The committed
manifest names files that SGLang's tests of the classes kvfuzz drives need; with them in place,
they pass on the release (those listed as failing deselected)."""

from __future__ import annotations

import hashlib
import json

import pytest

from kvfuzz.bench import upstream_sources

SGLANG = upstream_sources.manifest_path("sglang-0.5.23-tests")


@pytest.fixture
def copy(tmp_path):
    source = tmp_path / "checkout"
    (source / "test" / "unit").mkdir(parents=True)
    (source / "test" / "unit" / "test_pool.py").write_text("def test_a():\n    pass\n")
    digest = hashlib.sha256((source / "test" / "unit" / "test_pool.py").read_bytes()).hexdigest()
    manifest = tmp_path / "fake-1.0-tests.sources.json"
    manifest.write_text(json.dumps({"files": [
        {"path": "test/unit/test_pool.py", "commit": "abc", "sha256": digest}]}))
    return source, manifest


def test_the_files_are_copied_when_their_sha256_is_pinned(copy, tmp_path, capsys):
    source, manifest = copy
    to = tmp_path / "out"
    assert not upstream_sources.in_place(manifest, to)
    assert upstream_sources.main([str(manifest), "--from", str(source), "--to", str(to)]) == 0
    assert (to / "test" / "unit" / "test_pool.py").read_text().startswith("def test_a")
    assert upstream_sources.in_place(manifest, to)
    assert "1 files, sha256 checked" in capsys.readouterr().out


def test_a_changed_or_missing_file_is_one_line_and_nothing_is_copied(copy, tmp_path, capsys):
    source, manifest = copy
    (source / "test" / "unit" / "test_pool.py").write_text("def test_a():\n    assert 0\n")
    to = tmp_path / "out"
    assert upstream_sources.main([str(manifest), "--from", str(source), "--to", str(to)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "test_pool.py: sha256" in err and "commit abc" in err
    assert not to.exists()
    assert upstream_sources.main([str(manifest), "--from", str(tmp_path / "none")]) == 2
    assert "test_pool.py: missing" in capsys.readouterr().err


def test_a_malformed_manifest_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.sources.json"
    bad.write_text('{"files": [{"path": "x.py"}]}')
    assert upstream_sources.main([str(bad), "--from", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.sources.json: not a sources manifest" in err


def test_the_sglang_manifest_pins_a_commit_and_a_digest_per_file():
    """A commit, or where the stored index names none for the version used, its id there."""
    files = upstream_sources.read_manifest(SGLANG)["files"]
    assert files and all(len(f["sha256"]) == 64 for f in files)
    assert all(len(f["commit"] or "") == 40 or f.get("index_id", "").isdigit() for f in files)


@pytest.mark.slow  # pytest in a process of its own, SGLang imported there (about 20 s)
def test_sglangs_own_tests_pass_on_the_release():
    from kvfuzz.bench import upstream_tests
    from kvfuzz.impl import upstream_cache

    if not upstream_sources.in_place(SGLANG):
        pytest.skip("SGLang's test files are not in place: python -m "
                    "kvfuzz.bench.upstream_sources sglang-0.5.23-tests --from DIR")
    if not upstream_cache.fetched():
        pytest.skip("needs the released engines (kvfuzz upstream fetch)")
    root = upstream_sources.default_destination(SGLANG)
    files = [f["path"] for f in upstream_sources.read_manifest(SGLANG)["files"]]
    assert upstream_tests.main([str(root), *files, "-x"]) == 0
