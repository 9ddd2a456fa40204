"""Every file in corpus/ replayed against every bundled implementation of its target: a bug found
once, by any path, stays a regression test. And the corpus alone kills every mutant."""

from __future__ import annotations

import functools

import pytest

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.fuzz.targets import TARGETS
from tests.conftest import CORPUS
from tests.helpers import by_tier, fail_with, mutants

FILES = corpus.input_files([CORPUS])


@pytest.mark.parametrize("target", TARGETS)
def test_corpus_holds_inputs_of_every_target(target):
    assert any(path.name.startswith(f"{target}-") for path in FILES), \
        f"no {target} inputs under {CORPUS}"


@pytest.mark.parametrize("path", by_tier(FILES, ids=lambda p: p.name))
def test_corpus_file_replays_clean_on_every_bundled_implementation(path):
    target, item = corpus.load(path)
    assert target.file_name(item) == path.name, "file name must derive from the content"
    for impl in target.catalogue.defaults():
        outcome = target.check(item, impl)
        if outcome.status == DIVERGE:
            outcome.divergence.saved_path = str(path)
            fail_with(outcome.divergence, save=False)


# Triton's mutants run under the interpreter (slow): they have pinned cases in test_triton.py.
MUTANTS = [m for name in TARGETS for m in mutants(name) if ".triton." not in m.name]


@functools.cache
def notes_of(target_name: str) -> tuple[tuple[object, str], ...]:
    """(path, note) of each corpus file of the target, read once a process: every mutant's test
    loaded all of the corpus again (some 0.2 CPU s each, 50 of the file's 100 in CI), where it
    needs only its target's files, fresh, up to the first that catches it."""
    owner = TARGETS[target_name]
    return tuple((path, getattr(item, "note", "") or "") for path in FILES
                 for loaded, item in [corpus.load(path)] if loaded is owner)


@pytest.mark.parametrize("mutant", by_tier(MUTANTS, ids=lambda m: m.name))
def test_corpus_kills_every_mutant(mutant):
    if not mutant.available():
        pytest.skip(f"{mutant.name} needs {mutant.requires} installed")
    target = TARGETS[mutant.target]
    paths = list(notes_of(mutant.target))
    # The inputs shrunk from the mutant's own stream first (a profile's mutant, e.g. of the
    # unified cache's Mamba component, is reached by its profile's traces only): the same
    # verdict, without checking every other input before them.
    pick = getattr(target.generator, "generator_for", None)  # a trace target's
    if pick is not None:
        stream = pick([mutant]).name.split("[")[0]
        paths.sort(key=lambda pair: f"generator {stream}," not in pair[1])
    # each input loaded afresh: a mutant that changes what it was given changes no other test
    assert any(target.check(corpus.load(path)[1], mutant).status == DIVERGE
               for path, _ in paths), f"no corpus input catches {mutant.name}"
