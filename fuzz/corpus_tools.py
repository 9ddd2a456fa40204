"""`kvfuzz corpus merge|minimize`: keep the committed corpus small and free of duplicates.

merge: copy cases from other directories; names derive from content, so a case already present
is skipped. minimize: keep a subset that covers the same features as the whole corpus (edge
classes, contract-violation kinds, and the divergence signature of every registered
implementation but outside ones, mutants included, so no mutant-killing case is lost); greedy set cover, largest
gain first, smaller case on ties. Files of plugin targets (traces) are merged but never removed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kvfuzz.fuzz import corpus
from kvfuzz.strategies.paged.case import Case


def merge(sources, into, out) -> int:
    files = corpus.case_files(sources)
    loaded = [(path, corpus.load_any(path)) for path in files]  # every file valid, or exit 2
    added = 0
    for path, item in loaded:
        if isinstance(item, Case):
            target = Path(into) / corpus.file_name(item)
            existed = target.exists()
            corpus.save(item, into)
        else:
            target = Path(into) / path.name
            existed = target.exists()
            if not existed:
                Path(into).mkdir(parents=True, exist_ok=True)
                temporary = target.with_name(f".tmp-{target.name}")
                shutil.copyfile(path, temporary)
                temporary.replace(target)
        added += not existed
    print(f"merged {len(loaded)} file(s) into {into}: {added} new, "
          f"{len(loaded) - added} already there", file=out)
    return 0


def case_features(case: Case, impls) -> set[str]:
    from kvfuzz.fuzz.engine import DIVERGE, check
    from kvfuzz.oracle.paged.contract import violations
    from kvfuzz.strategies.paged.edges import edge_classes

    found = violations(case)
    if found:
        return {f"{case.target} outside: {v.kind}" for v in found}
    features = {f"{case.target} edge: {name}" for name in edge_classes(case)}
    for impl, fn in impls.get(case.target, ()):
        outcome = check(impl, fn, case)
        if outcome.status == DIVERGE:
            features.add(f"diverges: {outcome.divergence.signature()}")
    return features


def minimize(directory, impl_specs, dry_run: bool, out) -> int:
    from kvfuzz.impl.registry import OUTSIDE, implementations, resolve

    loaded = [(path, corpus.load_any(path)) for path in corpus.case_files([directory])]
    cases = [(path, item) for path, item in loaded if isinstance(item, Case)]
    impls = {}
    for target in {case.target for _, case in cases}:
        chosen = [resolve(target, s) for s in impl_specs] or \
            [i for i in implementations(target) if i.kind != OUTSIDE]
        impls[target] = [(impl, impl.load()) for impl in chosen]
    features = {path: case_features(case, impls) for path, case in cases}
    size = {path: len(case.free_pages) + sum(case.seq_lens) for path, case in cases}
    wanted = set().union(*features.values()) if features else set()
    kept, covered = [], set()
    while covered != wanted:
        best = max(features, key=lambda p: (len(features[p] - covered), -size[p], str(p)))
        kept.append(best)
        covered |= features.pop(best)
    removed = [path for path, _ in cases if path not in kept]
    for path in removed:
        if not dry_run:
            path.unlink()
        print(f"{'would remove' if dry_run else 'removed'}  {path}", file=out)
    print(f"corpus {directory}: kept {len(kept)} of {len(cases)} case(s) covering "
          f"{len(wanted)} feature(s); {len(loaded) - len(cases)} trace file(s) kept as they are",
          file=out)
    return 0
