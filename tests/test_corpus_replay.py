"""Every case in corpus/ replayed against every bundled implementation of its target: a bug
found once, by any path, stays a regression test."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz import corpus
from kvfuzz.fuzz.engine import DIVERGE, check
from tests.conftest import CORPUS
from tests.helpers import bundled, fail_with

PAGED_FILES = sorted(p for p in CORPUS.glob("*.json") if p.name.startswith(("extend-", "decode-")))


def test_corpus_holds_paged_cases():
    assert PAGED_FILES, f"no extend/decode cases under {CORPUS}"


@pytest.mark.parametrize("path", PAGED_FILES, ids=lambda p: p.name)
def test_corpus_case_replays_clean_on_every_bundled_implementation(path):
    case = corpus.load(path)
    assert corpus.file_name(case) == path.name, "file name must derive from the content"
    for impl in bundled(case.target):
        outcome = check(impl, impl.load(), case)
        if outcome.status == DIVERGE:
            outcome.divergence.saved_path = str(path)
            fail_with(outcome.divergence, save=False)


def test_corpus_kills_every_torch_mutant():
    # The committed corpus is a regression suite on its own: each deliberately broken variant
    # of the torch functions must fail on at least one committed case.
    from kvfuzz.impl.registry import MUTANT, implementations

    cases = [corpus.load(path) for path in PAGED_FILES]
    survivors = []
    for target in ("extend", "decode"):
        for mutant in implementations(target, MUTANT):
            if not mutant.path.startswith("kvfuzz.impl.paged.mutants:"):
                continue
            fn = mutant.load()
            if not any(check(mutant, fn, case).status == DIVERGE
                       for case in cases if case.target == target):
                survivors.append(mutant.name)
    assert not survivors, f"no corpus case catches {survivors}"
