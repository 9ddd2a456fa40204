"""The `kvfuzz` command as a user meets it: exit statuses, one-line errors, saved and replayed
divergences."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvfuzz.fuzz.cli import main


def kvfuzz(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fuzz.cli", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_list_names_targets_and_implementations(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "extend:" in out and "decode:" in out and "torch.vectorized" in out


def test_diff_passes_on_bundled_implementations(tmp_path, capsys):
    assert main(["diff", "extend", "--cases", "200", "--corpus", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "summary: extend" in err and "edge classes hit" in err
    assert not list(tmp_path.iterdir())


def test_diff_with_jobs_passes(tmp_path):
    result = kvfuzz("diff", "decode", "--cases", "300", "--jobs", "2", "--corpus", str(tmp_path))
    assert result.returncode == 0, result.stderr


def test_divergence_is_saved_and_replays_with_the_same_report(tmp_path, capsys):
    status = main(["diff", "extend", "--impl", "mutant.owner_left_bisect", "--cases", "500",
                   "--corpus", str(tmp_path)])
    assert status == 1
    err = capsys.readouterr().err
    saved = list(tmp_path.glob("extend-*.json"))
    assert len(saved) == 1 and "DIVERGENCE" in err and str(saved[0]) in err
    assert main(["replay", str(saved[0]), "--impl", "mutant.owner_left_bisect"]) == 1
    replayed = capsys.readouterr().out
    assert "wrong slot" in replayed and f"kvfuzz replay {saved[0]}" in replayed
    assert main(["replay", str(saved[0])]) == 0  # the bundled implementations agree


def test_outside_implementation_by_import_path(tmp_path):
    result = kvfuzz("diff", "extend", "--impl", "kvfuzz.impl.paged.vectorized:alloc_extend", "--cases", "100",
                    "--corpus", str(tmp_path))
    assert result.returncode == 0, result.stderr


BAD_INPUTS = {
    "unknown implementation": (["diff", "extend", "--impl", "no.such"], "unknown implementation"),
    "unresolvable import path": (["diff", "extend", "--impl", "nosuchpkg.mod:fn"],
                                 "cannot import 'nosuchpkg.mod'"),
    "missing attribute": (["diff", "extend", "--impl", "kvfuzz.impl.paged.vectorized:nope"],
                          "has no attribute 'nope'"),
    "unknown target": (["diff", "nosuch"], "invalid choice"),
    "missing file": (["replay", "/nonexistent/case.json"], "no such file"),
    "bad case count": (["diff", "extend", "--cases", "0"], "positive integer"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_usage_exits_2_with_one_line(name):
    args, expected = BAD_INPUTS[name]
    result = kvfuzz(*args)
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


MALFORMED = {
    "not json": ("{oops", "not valid JSON"),
    "wrong format": ({"format": "other"}, "field 'format'"),
    "page size zero": ({"format": "kvfuzz-case/1", "target": "decode", "page_size": 0,
                        "seq_lens": [], "last_loc": [], "free_pages": []}, "field 'page_size'"),
    "non-integer slot": ({"format": "kvfuzz-case/1", "target": "decode", "page_size": 4,
                          "seq_lens": [2], "last_loc": ["x"], "free_pages": []},
                         "field 'last_loc[0]'"),
    "lists differ": ({"format": "kvfuzz-case/1", "target": "decode", "page_size": 4,
                      "seq_lens": [2, 3], "last_loc": [4], "free_pages": []}, "differ in length"),
    "unknown field": ({"format": "kvfuzz-case/1", "target": "decode", "page_size": 4,
                       "seq_lens": [], "last_loc": [], "free_pages": [], "extra": 1},
                      "field 'extra'"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_case_file_names_file_field_and_value(name, tmp_path):
    content, expected = MALFORMED[name]
    path = tmp_path / "case.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    result = kvfuzz("replay", str(path))
    assert result.returncode == 2
    assert str(path) in result.stderr and expected in result.stderr
    assert "Traceback" not in result.stderr
