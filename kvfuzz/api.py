"""kvfuzz as a library: the seeded differential, replay and single checks from Python, with an
implementation given as a registered name, an import path, or the callable or class itself.

    import kvfuzz

    result = kvfuzz.diff("extend", my_alloc_extend, cases=2000)
    assert result.ok, result.report()
    kvfuzz.assert_agrees("allocator", MyAllocator, cases=200)   # fails with the full report
    kvfuzz.replay("corpus/", my_alloc_extend)                    # every file of its target
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from kvfuzz.fuzz.engine import corpus as corpus_files
from kvfuzz.fuzz.engine.diff import DiffResult, run_diff
from kvfuzz.fuzz.engine.guard import GuardUnsupported, live_guard
from kvfuzz.fuzz.engine.impl_process import DEFAULT_MEMORY
from kvfuzz.fuzz.engine.isolation import DEFAULT_TIMEOUT, Checker
from kvfuzz.fuzz.engine.report import Divergence, Mismatch
from kvfuzz.fuzz.engine.run import RunOptions
from kvfuzz.fuzz.engine.target import DIVERGE, Outcome
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import YOURS, Implementation, register_object

Impl = str | Callable[..., Any] | type | Implementation
__all__ = ["diff", "replay", "check", "assert_agrees", "implementation", "applicable", "guard",
           "record", "GuardUnsupported", "DiffResult", "ReplayResult", "Divergence", "Mismatch",
           "Outcome"]


def implementation(target: str, impl: Impl) -> Implementation:
    """The `Implementation` record of `impl` for `target`: a registered name ("torch.loop"), an
    import path ("mypkg.alloc:alloc_extend"), or the function or class itself (checked to have
    the shape the target calls)."""
    owner = _target(target)
    if isinstance(impl, Implementation):
        return impl
    if isinstance(impl, str):
        return owner.catalogue.resolve(impl)
    name = f"{getattr(impl, '__module__', '?')}:{getattr(impl, '__qualname__', repr(impl))}"
    owner.catalogue.shape(name, impl)
    return owner.catalogue.declared(Implementation(name, target, register_object(impl),
                                         "given as an object", YOURS), impl)


def diff(target: str, impl: Impl | Iterable[Impl] | None = None, *, cases: int | None = None,
         seed: int = 0, start: int = 0, jobs: int = 1, corpus: str | Path | None = None,
         timeout: float = DEFAULT_TIMEOUT, memory: int = DEFAULT_MEMORY, device: str = "cpu",
         keep_going: bool = False, profile: str | None = None, out=None) -> DiffResult:
    """Seeded inputs `start`..`start + cases` of `seed` through `impl` (default: the bundled
    implementations) and the oracle, in supervised worker processes (each implementation in a
    process of its own, `memory` bytes at most): what `kvfuzz diff` does, returned rather than
    printed. Divergences are shrunk; with `corpus`, saved there too. Each implementation stops
    at its first divergence, unless `keep_going` (`--keep-going`): then every input is checked
    and each distinct divergence signature is one of `divergences`. `profile`: the inputs of
    that generator profile alone (`--profile`; a ValueError naming the profiles otherwise)."""
    owner = _target(target)
    owner.alone(profile)  # a profile it does not have: a ValueError before anything runs
    impls = [implementation(target, one) for one in _many(impl)] or \
        owner.catalogue.defaults_or_error()
    if corpus is not None:
        corpus_files.check_writable(corpus)
    options = RunOptions(cases or owner.settings.default_cases, seed, start, jobs, device, timeout,
                         None if corpus is None else str(corpus), memory, keep_going, profile)
    result = run_diff(owner, impls, options, out or io.StringIO())
    if result.interrupted:
        raise KeyboardInterrupt
    return result


@dataclass
class ReplayResult:
    """Each (file, implementation) replayed, and the divergences among them."""

    outcomes: list[tuple[Path, str, Outcome]] = field(default_factory=list)

    @property
    def divergences(self) -> list[Divergence]:
        return [outcome.divergence for _, _, outcome in self.outcomes
                if outcome.status == DIVERGE]

    @property
    def ok(self) -> bool:
        return not self.divergences

    def report(self) -> str:
        return "\n\n".join(d.report() for d in self.divergences)


def replay(paths: str | Path | Iterable[str | Path], impl: Impl | Iterable[Impl] | None = None,
           *, timeout: float = DEFAULT_TIMEOUT, memory: int = DEFAULT_MEMORY,
           device: str = "cpu") -> ReplayResult:
    """Saved inputs (files, or every *.json under directories) against `impl` where it applies
    (an implementation of another target skips those files); default: the bundled ones. A bad
    file raises `FormatError` or `CorpusError` naming it."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    loaded = [(path, *corpus_files.load(path)) for path in corpus_files.input_files(paths)]
    # Every implementation resolved before the first check: an object is registered by id, and
    # a worker forked before its registration would not know it.
    chosen = {target.name: applicable(target.name, impl) if impl is not None else
              target.catalogue.defaults() for _, target, _ in loaded}
    result, checker = ReplayResult(), Checker(timeout, memory)
    try:
        for path, target, item in loaded:
            for one in chosen[target.name]:
                outcome = checker.check(target, item, one, device)
                if outcome.divergence is not None:
                    outcome.divergence.saved_path = str(path)
                result.outcomes.append((Path(path), one.name, outcome))
    finally:
        checker.close()
    return result


def check(target: str, item, impl: Impl, *, device: str = "cpu") -> Outcome:
    """One input of `target` (e.g. drawn from `kvfuzz.extend_cases()`) through `impl` and the
    oracle, in this process: fast enough for a Hypothesis property, no isolation."""
    return _target(target).check(item, implementation(target, impl), device)


def assert_agrees(target: str, impl: Impl | Iterable[Impl], item=None, **diff_options) -> None:
    """Fail with the full divergence report(s), replay lines included, unless `impl` agrees with
    the oracle: on `item` if one is given (in this process), else on a seeded run (`diff`)."""
    if item is not None:
        for one in _many(impl):
            outcome = check(target, item, one)
            if outcome.status == DIVERGE:
                raise Mismatch(outcome.divergence)
        return
    result = diff(target, impl, **diff_options)
    if result.divergences:
        raise AssertionError("\n\n".join(d.report() for d in result.divergences))


def guard(obj, target: str, *, impl: Impl | None = None, corpus: str | Path = "corpus",
          **settings):
    """`obj`, a live object an engine is using (vLLM's `KVCacheManager` for "kvmanager"),
    wrapped: each call goes to it and, in lock step, to the oracle; the target's checks run
    after every call. The first divergence is saved under `corpus` as the trace of the calls so
    far (replayable with `kvfuzz replay`) and raised as `Mismatch` with the usual report; a
    call the target's trace does not model raises `GuardUnsupported` before it is made.
    `impl` names the object in reports (default: its class's catalogue entry, or its import
    path); `settings` are what the object does not keep (e.g. `max_in_flight_tokens`). The
    wrapper's `kvfuzz_session` holds the trace so far (`.trace()`, `.save(directory)`)."""
    return live_guard(target)(obj, check=True, impl=impl, corpus=corpus, **settings)


def record(obj, target: str, **settings):
    """`obj` wrapped as `guard` wraps it, recording its calls as the target's trace without
    checking them: `wrapped.kvfuzz_session.save(directory)` writes the corpus file."""
    return live_guard(target)(obj, check=False, **settings)


def _target(name: str):
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r} (known: {', '.join(TARGETS)})")
    return TARGETS[name]


def _many(impl) -> list:
    if impl is None:
        return []
    if isinstance(impl, (str, Implementation, type)) or callable(impl):
        return [impl]
    return list(impl)


def applicable(target: str, impls) -> list[Implementation]:
    """Those of `impls` that are implementations of `target` (others are skipped)."""
    chosen = []
    for one in _many(impls):
        try:
            chosen.append(implementation(target, one))
        except ValueError:  # ImplementationError: another target's, not for these files
            continue
    return chosen
