"""Atheris targets that `kvfuzz fuzz` can run: one entry each, hooks resolved by import path.

A target names its atheris script and two hooks:
- `seeds(paths) -> iterator of bytes`: fuzzer inputs for the JSON files under `paths` (the
  byte corpus is a working copy, rebuilt from the committed JSON corpus);
- `triage(path, impl_specs, stopping) -> list[Finding]`: what a file the target saved on a
  failure shows, each finding minimised (while `stopping()` is false) and keyed by signature.
New targets (allocator traces, compaction traces) add one `FuzzTarget` to `FUZZ_TARGETS`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class FuzzTarget:
    name: str
    script: str              # relative to the repository root
    triage: str              # "module:fn"
    seeds: str | None = None  # "module:fn"; None: the campaign starts from an empty corpus
    takes_impl: bool = True
    # Where findings go: "corpus" (JSON cases, replayed by pytest) or "work" (the campaign's
    # work directory: e.g. malformed loader inputs, which are not cases).
    output: str = "corpus"
    # "module:fn" -> accepted --impl names, for targets outside impl.registry (None: resolve())
    impl_names: str | None = None
    # libFuzzer flags before the user's: traces need long inputs from the start (libFuzzer's
    # length control would spend minutes on one-op traces)
    flags: tuple[str, ...] = ()


@dataclass
class Finding:
    signature: str           # what diverged, as text; the dedup key
    headline: str
    report: str
    save: Callable[[Path], Path]   # writes the minimised input into a directory, atomically
    replay: Callable[[Path], str]  # the command that replays the saved file
    note: str = ""           # e.g. "shrunk from 109 requests to 3"


FUZZ_TARGETS = {t.name: t for t in (
    FuzzTarget("extend", "fuzz/targets_atheris/fuzz_extend.py", "kvfuzz.fuzz.fuzz_targets:triage_paged",
               "kvfuzz.fuzz.fuzz_targets:seeds_extend"),
    FuzzTarget("decode", "fuzz/targets_atheris/fuzz_decode.py", "kvfuzz.fuzz.fuzz_targets:triage_paged",
               "kvfuzz.fuzz.fuzz_targets:seeds_decode"),
    FuzzTarget("case_loader", "fuzz/targets_atheris/fuzz_case_loader.py",
               "kvfuzz.fuzz.fuzz_targets:triage_loader", takes_impl=False, output="work"),
    FuzzTarget("compaction", "fuzz/targets_atheris/fuzz_compaction.py",
               "kvfuzz.fuzz.compaction_fuzz:triage", impl_names="kvfuzz.fuzz.compaction_fuzz:impl_names",
               flags=("-len_control=0", "-max_len=2048")),
    FuzzTarget("allocator", "fuzz/targets_atheris/fuzz_allocator.py",
               "kvfuzz.fuzz.allocator_fuzz:triage", impl_names="kvfuzz.fuzz.allocator_fuzz:impl_names",
               flags=("-len_control=0", "-max_len=2048")),
)}


def _seeds(target: str, paths):
    from kvfuzz.fuzz import corpus
    from kvfuzz.strategies.paged.bytes_chooser import encode
    from kvfuzz.strategies.paged.case import Case, CaseFormatError

    for path in corpus.case_files([p for p in paths if os.path.exists(p)]):
        try:
            item = corpus.load_any(path)
        except (CaseFormatError, corpus.CorpusError):
            continue  # `kvfuzz replay` reports malformed files; seeding just skips them
        if isinstance(item, Case) and item.target == target:
            data = encode(item)
            if data is not None:
                yield data


def seeds_extend(paths):
    return _seeds("extend", paths)


def seeds_decode(paths):
    return _seeds("decode", paths)


def triage_paged(path, impl_specs, stopping) -> list[Finding]:
    """Re-run the saved case on each implementation; every divergence, shrunk, is a finding."""
    from kvfuzz.fuzz import corpus
    from kvfuzz.fuzz.engine import DIVERGE, check
    from kvfuzz.fuzz.harness import signature_text
    from kvfuzz.fuzz.shrink import same_divergence, shrink
    from kvfuzz.impl.registry import BUNDLED, implementations, resolve

    case = corpus.load(path)
    chosen = [resolve(case.target, s) for s in impl_specs] or implementations(case.target,
                                                                              BUNDLED)
    findings = []
    for impl in chosen:
        fn = impl.load()
        outcome = check(impl, fn, case)
        if outcome.status != DIVERGE:
            continue
        fails = same_divergence(impl, fn, outcome.divergence)
        small = shrink(case, lambda c: not stopping() and fails(c))
        divergence = check(impl, fn, small).divergence
        findings.append(Finding(
            signature_text(divergence.signature()), divergence.headline(), divergence.report(),
            save=lambda directory, small=small: corpus.save(small, directory),
            replay=lambda saved, name=impl.name: f"kvfuzz replay {saved} --impl {name}",
            note=f"shrunk from {case.batch_size} requests / {len(case.free_pages)} free pages "
                 f"to {small.batch_size} / {len(small.free_pages)}"))
    return findings


def triage_loader(path, impl_specs, stopping) -> list[Finding]:
    """A loader failure: the saved text and the exception it raises (not CaseFormatError)."""
    import json

    from kvfuzz.strategies.paged.case import CaseFormatError, loads

    raw = Path(path).read_bytes()
    text = raw.decode("utf-8", "surrogatepass")
    try:
        loads(text, source=str(path))
        return []
    except CaseFormatError:
        return []
    except Exception as error:
        kind = type(error).__name__
        headline = f"case loader raised {kind}, not CaseFormatError: {str(error)[:120]}"

        def save(directory: Path) -> Path:
            from kvfuzz.fuzz.harness import write_atomic
            directory = Path(directory)
            directory.mkdir(parents=True, exist_ok=True)
            target = directory / Path(path).name
            write_atomic(target, raw)
            return target
        replay = (lambda saved: ".venv/bin/python -c \"import sys; from strategies.case import "
                  "loads; loads(open(sys.argv[1], 'rb').read().decode('utf-8', "
                  f"'surrogatepass'))\" {saved}")
        return [Finding(json.dumps(["case_loader", kind]), headline, headline, save, replay,
                        note=f"{len(raw)} bytes")]
