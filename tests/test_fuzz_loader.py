"""The case loader answers malformed case files with CaseFormatError and nothing else, and the
loader target notices (and saves) anything else."""

from __future__ import annotations

import random

import pytest

import kvfuzz.fuzz.malformed_json as malformed_json
from kvfuzz.fuzz.malformed_json import LoaderHarness, malformed
from kvfuzz.strategies.paged.case import CaseFormatError, loads


def test_random_malformed_case_files_raise_only_case_format_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("KVFUZZ_FOUND", str(tmp_path))
    harness = LoaderHarness("case_loader")
    rng = random.Random(5)
    for _ in range(1500):
        harness.test_one_input(rng.randbytes(rng.choice((4, 32, 128, 512))))
    assert harness.counts["loads rejected"] > 300  # it did break files...
    assert harness.counts["loads accepted"] > 100  # ...and left some whole
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ['{"format": ' + "1" * 5000 + "}", "[" * 50_000 + "]" * 50_000,
                                  '{"format": NaN}', "\ufeff{}", ""])
def test_numbers_and_nesting_past_the_parser_limits_are_format_errors(text):
    with pytest.raises(CaseFormatError):
        loads(text)


def test_the_target_saves_and_raises_on_any_other_exception(tmp_path, monkeypatch):
    monkeypatch.setenv("KVFUZZ_FOUND", str(tmp_path))

    def broken_loads(text, source="case"):
        raise KeyError("format")

    monkeypatch.setattr(malformed_json, "loads", broken_loads)
    harness = LoaderHarness("case_loader")
    with pytest.raises(AssertionError, match="KeyError"):
        harness.test_one_input(b"\x01\x02")
    saved = list(tmp_path.iterdir())
    assert len(saved) == 1 and saved[0].read_bytes().decode() == malformed(b"\x01\x02")[1]
