"""`kvfuzz corpus merge|minimize`: keep a corpus small and free of duplicates, for every target.

merge: copy inputs from other directories; names derive from content, so an input already present
is skipped. minimize: keep a subset covering the same features as the whole corpus: what each
input exercises (its target's features: edge classes, calls, ops), the contract violations it
carries, and the divergence signature of every registered implementation but outside ones,
mutants included, so no mutant-killing input is lost. Greedy set cover, largest gain first,
smaller file on ties.
"""

from __future__ import annotations

from pathlib import Path

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.engine.isolation import Checker
from kvfuzz.fuzz.engine.stop_signals import held
from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.impl.registry import UPSTREAM


def merge(sources, into, out) -> int:
    loaded = [corpus.load(path) for path in corpus.input_files(sources)]  # all valid, or exit 2
    added = 0
    for target, item in loaded:
        added += not (Path(into) / target.file_name(item)).exists()
        try:
            corpus.save(target, item, into)
        except OSError as error:  # a full disk midway: the files merged so far are whole
            raise corpus.CorpusError(f"--into {into}: cannot write there: "
                                     f"{error.strerror or error}") from None
    print(f"merged {len(loaded)} file(s) into {into}: {added} new, "
          f"{len(loaded) - added} already there", file=out)
    return 0


def input_features(target, item, impls, check=None) -> set[str]:
    """What `item` contributes: its target's features and contract violations, and the
    divergence signature of each of `impls` that diverges on it (`check` runs it; the command
    passes a supervised worker's)."""
    found = set()
    for impl in impls:
        outcome = check(target, item, impl) if check else target.check(item, impl)
        found |= {f"{target.name} feature: {name}" for name in outcome.features}
        found |= {f"{target.name} outside: {kind}" for kind in outcome.outside}
        if outcome.status == DIVERGE:
            found.add(f"diverges: {outcome.divergence.signature}")
    return found


def minimize(directory, impl_specs, dry_run: bool, out) -> int:
    # Another run may be writing to the folder (a `diff` saving and replacing its findings):
    # a file gone by the time it is read is left out, one that appears is left alone.
    paths, loaded = corpus.input_files([directory]), {}
    for path in paths:
        try:
            loaded[path] = corpus.load(path)
        except corpus.CorpusError:
            if path.exists():
                raise
    paths = list(loaded)
    impls = {}
    for target, _ in loaded.values():
        if target.name not in impls:
            impls[target.name] = [target.catalogue.resolve(s) for s in impl_specs] or \
                [i for i in target.catalogue.implementations
                 if i.kind != UPSTREAM or i.default]  # what a corpus is kept to kill
    checker = Checker()
    try:
        features = {path: input_features(target, item, impls[target.name], checker.check)
                    for path, (target, item) in loaded.items()}
    finally:
        checker.close()
    size = {path: _size(path) for path in paths}
    wanted = set().union(*features.values()) if features else set()
    kept, covered = [], set()
    while covered != wanted:
        best = max(features, key=lambda p: (len(features[p] - covered), -size[p], str(p)))
        kept.append(best)
        covered |= features.pop(best)
    removed = [path for path in paths if path not in kept]
    with held():  # the cover is decided: a stop signal now waits until it is applied
        for path in removed:
            if not dry_run:
                path.unlink(missing_ok=True)
            print(f"{'would remove' if dry_run else 'removed'}  {path}", file=out)
    print(f"corpus {directory}: kept {len(kept)} of {len(paths)} file(s) covering "
          f"{len(wanted)} feature(s)", file=out)
    return 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # removed meanwhile: nothing to keep it for
        return 1 << 62
