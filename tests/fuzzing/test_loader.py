"""The loaders of every target's format answer malformed files with FormatError and nothing else,
and the loader target notices (and saves) anything else."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import kvfuzz.fuzz.campaign.loader_fuzz as loader_fuzz
from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.campaign.loader_fuzz import LoaderHarness, malformed
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.strategies.inputs import FormatError


@pytest.mark.slow  # 1,500 malformed files
def test_random_malformed_files_of_every_format_raise_only_format_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("KVFUZZ_FOUND", str(tmp_path))
    harness = LoaderHarness()
    rng = random.Random(5)
    formats = Counter()
    for _ in range(1500):
        data = rng.randbytes(rng.choice((4, 32, 128, 512)))
        harness.test_one_input(data)
        value = malformed(data)[0]
        formats[str(value.get("format")) if isinstance(value, dict) else None] += 1
    assert harness.counts["loads rejected"] > 300  # it did break files...
    assert harness.counts["loads accepted"] > 100  # ...and left some whole
    assert {t.codec.format for t in TARGETS.values()} <= set(formats)  # of every format
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ['{"format": ' + "1" * 5000 + "}", "[" * 50_000 + "]" * 50_000,
                                  '{"format": NaN}', "\ufeff{}", "", '{"format": []}'])
def test_numbers_and_nesting_past_the_parser_limits_are_format_errors(text):
    with pytest.raises(FormatError):
        corpus.loads(text, "x.json")


def test_the_target_saves_and_raises_on_any_other_exception(tmp_path, monkeypatch):
    monkeypatch.setenv("KVFUZZ_FOUND", str(tmp_path))

    def broken_loads(text, source="case"):
        raise KeyError("format")

    monkeypatch.setattr(loader_fuzz.corpus, "loads", broken_loads)
    harness = LoaderHarness()
    with pytest.raises(AssertionError, match="KeyError"):
        harness.test_one_input(b"\x01\x02")
    saved = list(tmp_path.iterdir())
    assert len(saved) == 1 and saved[0].read_bytes().decode() == malformed(b"\x01\x02")[1]
