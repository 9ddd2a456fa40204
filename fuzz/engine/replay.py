"""`kvfuzz replay`: run saved inputs of any target against implementations; one line per
agreement, a full report per divergence. Every file is read and checked first: each bad one is
reported in one line, the good ones still run, and the exit status says some were bad.

`replay_in_process` (`--in-process`, `--pdb`) runs one input in this process, for a debugger."""

from __future__ import annotations

import faulthandler
import pdb
import sys
import traceback
from collections import Counter

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.engine.impl_process import DEFAULT_MEMORY
from kvfuzz.fuzz.engine.isolation import DEFAULT_TIMEOUT, Checker
from kvfuzz.fuzz.engine.report import raised_here
from kvfuzz.fuzz.engine.stop_signals import INTERRUPTED, interrupting
from kvfuzz.fuzz.engine.target import AGREE, DIVERGE, OUTSIDE_CONTRACT
from kvfuzz.impl.registry import ImplementationError
from kvfuzz.strategies.inputs import FormatError

BAD_INPUT = 2


def replay(paths, impl_specs, out=None, device: str = "cpu", err=None,
           timeout: float = DEFAULT_TIMEOUT, memory: int = DEFAULT_MEMORY) -> int:
    """Exit status: 0 every input agreed (or was outside the contract),
    1 a divergence, 2 a file was bad (after the good ones ran)."""
    out, err = out or sys.stdout, err or sys.stderr  # looked up now: tests replace them
    loaded, bad = [], 0
    for path in corpus.input_files(paths):
        try:
            loaded.append((path, *corpus.load(path)))
        except (FormatError, corpus.CorpusError) as error:
            print(f"kvfuzz: error: {error}", file=err)
            bad += 1
    chosen = choose_implementations({target for _, target, _ in loaded}, impl_specs)
    missing = {target: target.catalogue.not_run_reason() for _, target, _ in loaded
               if not impl_specs and not chosen[target.name]}
    not_run = Counter(target.name for _, target, _ in loaded if target in missing)
    skipped = Counter(target.name for _, target, _ in loaded
                      if not chosen[target.name] and target not in missing)
    status, checker, done, interrupted = 0, Checker(timeout, memory), 0, False
    try:
        with interrupting():
            for path, target, item in loaded:
                for impl in chosen[target.name]:
                    outcome = checker.check(target, item, impl, device)
                    status = max(status, _print(path, impl, outcome, out))
                done += bool(chosen[target.name])
    except KeyboardInterrupt:
        interrupted = True
    finally:
        checker.close()
    if interrupted:
        print(f"replay interrupted after {done} of {len(loaded)} file(s): "
              f"{'divergence found' if status else 'no divergence so far'}", file=out)
        return INTERRUPTED
    for target, reason in sorted(missing.items(), key=lambda item: item[0].name):
        print(f"not run: {not_run[target.name]} {target.name} file(s): {reason}", file=out)
    if skipped:
        print(f"skipped {sum(skipped.values())} file(s) of targets no --impl applies to: "
              + ", ".join(f"{name} {count}" for name, count in sorted(skipped.items())),
              file=out)
    print(f"replayed {len(loaded) - sum(skipped.values()) - sum(not_run.values())} file(s): "
          f"{'divergence found' if status else 'no divergence'}"
          + (f"; {bad} bad file(s) not replayed" if bad else ""), file=out)
    return BAD_INPUT if bad else status


def replay_in_process(path, impl_specs, out=None, device: str = "cpu",
                      debug: bool = False) -> int:
    """One saved input through its implementations in this process: no worker, no timeout, no
    isolation, so a debugger sees the implementation's own frames. Behind a divergence that the
    implementation raised, its whole traceback is printed and, with `debug`, pdb opens post
    mortem at it. A crash ends this process, faulthandler printing its stack. Exit status as
    `replay`'s."""
    out = out or sys.stdout
    target, item = corpus.load(path)
    impls = choose_implementations({target}, impl_specs)[target.name]
    if not impls:  # its target's packages are missing (an --impl that does not apply raised)
        raise ImplementationError(f"{path}: nothing to run: {target.catalogue.not_run_reason()}")
    status = 0
    for impl in impls:
        impl.load()
        # A segfault prints where it was before this process ends; enabled after the import
        # (which may put its own handler over faulthandler's, as SGLang's tvm_ffi does).
        faulthandler.disable()
        faulthandler.enable(2)  # the process's stderr, whatever `sys.stderr` is now
        with raised_here() as raised:
            outcome = target.check(item, impl, device)
        status = max(status, _print(path, impl, outcome, out))
        if outcome.status != DIVERGE:
            continue
        if raised:
            print(f"{impl.name} raised it; the whole traceback, in this process:", file=out)
            print("".join(traceback.format_exception(raised[0])).rstrip(), file=out, flush=True)
            if debug:
                pdb.post_mortem(raised[0].__traceback__)
        elif debug:
            print(f"--pdb: {impl.name} raised nothing (a wrong answer, not an exception); "
                  f"no post-mortem", file=out)
    return status


def choose_implementations(targets, specs) -> dict[str, list]:
    """Per target: its bundled implementations, or each --impl that names one of its own (a
    spec no target of the files knows is a usage error)."""
    chosen = {target.name: [] if specs else target.catalogue.defaults() for target in targets}
    for spec in specs:
        errors = []
        for target in sorted(targets, key=lambda t: t.name):
            try:
                chosen[target.name].append(target.catalogue.resolve(spec))
            except ImplementationError as error:
                errors.append(error)
        if targets and len(errors) == len(targets):  # one target: its own error, with its names
            names = ", ".join(sorted(target.name for target in targets))
            # The same error from every target (its module does not import): that one.
            same = len({str(error) for error in errors}) == 1
            raise errors[0] if same else ImplementationError(
                f"--impl {spec}: not an implementation of any target of the files given "
                f"({names})")
    return chosen


def _print(path, impl, outcome, out) -> int:
    if outcome.status == AGREE:
        print(f"ok                {path}  {impl.name}", file=out)
        return 0
    if outcome.status == OUTSIDE_CONTRACT:
        print(f"outside contract  {path}  {impl.name}: {outcome.behaviour} "
              f"({', '.join(outcome.outside)})", file=out)
        return 0
    outcome.divergence.saved_path = str(path)
    print(outcome.divergence.report(), file=out)
    return 1
