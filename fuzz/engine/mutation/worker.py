"""A mutation worker: one process that imports the implementation once (`plan`: the target, the
implementation, the files to mutate, their mutants, the unmutated run with its line trace),
then runs each mutant it is given in a child forked from itself (`run_apart`: a crash, a hang
or an exit costs that mutant alone, and no mutant sees another's edits). The fork is what lets
many mutants share one import soundly: each starts from the same unmutated process.

Not for what that process did once before the fork and keeps: a once-a-process set-up (a
registry filled lazily on first use) ran in the worker's own unmutated run, and its mutant,
placed in the child, is never called there. So each child records whether its mutant's
statement ran after placement (`ran`: `marking.py`); a survivor whose statement never ran is
rerun by a `fresh` worker, which imports and runs nothing before forking each mutant's child
(`run.py`)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from kvfuzz.fuzz.engine.apart import Failed, enter_sandbox, run_apart
from kvfuzz.fuzz.engine.mutation.mutants import Mutant, apply, enumerate_mutants
from kvfuzz.fuzz.engine.mutation.marking import arm, marked
from kvfuzz.fuzz.engine.mutation.placing import NotPlaced, functions, place_code
from kvfuzz.fuzz.engine.mutation.reach import LinesRun, LineTrace, reached
from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.impl.registry import ImplementationError, safe_text
from kvfuzz.impl.upstream_env import prepare_import


@dataclass(frozen=True)
class Request:
    target: str
    impl: str
    scopes: tuple[str, ...]     # "module" or "module:Qualname"; empty: what the impl names
    operators: tuple[str, ...]  # globs of operator names
    cases: int
    seed: int
    start: int
    memory: int
    trace: bool = True          # run the unmutated implementation with its line trace
    fresh: bool = False         # run no case before the fork (not even one to warm up)
    profile: str | None = None  # the generator profile alone (`Target.alone`; None: the mix)


@dataclass
class Plan:
    mutants: list = field(default_factory=list)
    reached: dict = field(default_factory=dict)   # mutant id -> bool
    scopes: list = field(default_factory=list)    # "module:Qualname" mutated
    digest: str = ""                              # of the mutated files' text
    stream: str = ""                              # the generator's name, e.g. "blockpool/3"
    seconds: float = 0.0                          # the unmutated run
    problem: str = ""                             # the unmutated run diverged, or no mutants


_STATE: dict = {}


def plan(request: Request) -> Plan:
    """Load everything the mutants share, in this process; what the run will mutate."""
    from kvfuzz.fuzz.targets import TARGETS

    enter_sandbox()  # the implementation is imported here, by design
    target = TARGETS[request.target].alone(request.profile)
    impl = target.catalogue.resolve(request.impl)
    obj = impl.load()
    scopes = list(request.scopes) or list(impl.mutates) or [_named(impl.path, obj)]
    sources, chosen, mutants = {}, {}, []
    for scope in scopes:
        module_name, _, qualname = scope.partition(":")
        try:
            with prepare_import(module_name):
                module = importlib.import_module(module_name)
        except Exception as error:  # noqa: BLE001 - the user's scope: one line
            raise ImplementationError(f"--scope {scope}: cannot import {module_name!r}: "
                                      f"{safe_text(error)}") from None
        path = getattr(module, "__file__", None)
        if not path or not path.endswith(".py"):
            raise ImplementationError(f"--scope {scope}: {module_name} has no Python source")
        source = Path(path).read_text()
        sources[module_name] = (module, source, functions(compile(source, path, "exec")))
        if qualname and not any(name == qualname or name.startswith(qualname + ".")
                                for name, _ in sources[module_name][2]):
            raise ImplementationError(f"--scope {scope}: {module_name} defines no function or "
                                      f"class {qualname!r}")
        chosen.setdefault(module_name, []).append(qualname)
    for module_name, qualnames in chosen.items():
        module, source, _ = sources[module_name]
        names = () if "" in qualnames else tuple(qualnames)
        mutants += enumerate_mutants(module_name, module.__file__, source, names,
                                     request.operators)
    _STATE.update(target=target, impl=impl, sources=sources, request=request)
    result = Plan(mutants=mutants, scopes=scopes, digest=hashlib.sha256(
        "".join(s for _, s, _ in sources.values()).encode()).hexdigest()[:16],
        stream=_stream(target, impl))
    if request.fresh:  # its children must find every lazy set-up not done yet
        return result
    began = time.perf_counter()
    paths = [module.__file__ for module, _, _ in sources.values()]
    with LineTrace(paths if request.trace else []) as trace:
        problem = _run_cases(request if request.trace else _one(request))
    result.seconds = time.perf_counter() - began
    if problem is not None:
        result.problem = (f"the unmutated implementation already diverges on case "
                          f"{problem['case']} ({problem['what']}): mutants would be killed by "
                          f"that, not by what they change")
    if request.trace:
        result.reached = {m.id: reached(trace.lines[m.path], m.line, m.end_line)
                          for m in mutants}
    return result


def _stream(target, impl) -> str:
    """The cases' generator by name and version: a results file's verdicts hold for one
    generator, and a new version (new ops, new edge classes) must not resume an old file."""
    inputs = target.generator
    generator = inputs.generator_for([impl]) if hasattr(inputs, "generator_for") else inputs
    name = str(getattr(generator, "name", "") or type(generator).__name__)
    # a mix of streams (kvmanager's) names its layout too: the same name, other shares, other cases
    layout = getattr(generator, "layout", None)
    return f"{name} [{layout}]" if isinstance(layout, str) and layout else name


def _named(path: str, obj) -> str:
    """The scope an import path names: its function or class, where it is defined."""
    module = getattr(obj, "__module__", None) or path.partition(":")[0]
    return f"{module}:{getattr(obj, '__qualname__', path.partition(':')[2])}"


def _one(request: Request) -> Request:
    """The same request with one case: a worker warms up without the full unmutated run."""
    return Request(**{**request.__dict__, "cases": 1})


def _run_cases(request: Request) -> dict | None:
    """The first divergence of the implementation as it is in this process, or None."""
    from kvfuzz.fuzz.engine.isolation import guarded_check

    target, impl = _STATE["target"], _STATE["impl"]
    for index in range(request.start, request.start + request.cases):
        item = target.generator.generate(request.seed, index, [impl])
        outcome = guarded_check(target, item, impl, "cpu")
        if outcome.status == DIVERGE:
            return {"case": index, "what": outcome.divergence.what}
    return None


def run_mutant(mutant: Mutant, timeout: float) -> dict:
    """One mutant in a child forked from this worker: its record (status and what was seen)."""
    began = time.perf_counter()
    try:
        record = run_apart(_in_child, mutant, timeout)
    except Failed as failed:
        if failed.what.startswith("still running"):
            record = {"status": "timeout", "what": f"timed out after {timeout:g} s"}
        elif failed.raised:
            record = {"status": "error", "what": failed.what}
        else:
            record = {"status": "crashed", "what": failed.what}
    record["seconds"] = round(time.perf_counter() - began, 3)
    return record


def _in_child(mutant: Mutant) -> dict:
    from kvfuzz.fuzz.engine.zygote import limit_data

    close_inherited(_STATE.get("pipe", -1))
    request = _STATE["request"]
    module, source, original = _STATE["sources"][mutant.module]
    try:
        mutated, before, after = apply(source, mutant)
        record = {"before": before, "after": after}
        flagged = marked(mutated, module.__file__, mutant.line, mutant.column)
        changed = place_code(module, original, mutated, flagged)
    except (ValueError, SyntaxError, NotPlaced) as error:
        return {"status": "incompetent", "what": safe_text(error)}
    if not changed:
        return {**record, "status": "equivalent", "what": "compiles to the original's code"}
    limit_data(request.memory)
    flag = arm()
    # where no statement holds the edit, a trace tells (slower; none of today's operators)
    watch = LinesRun(changed.values(), mutant.line, mutant.end_line) if flagged is None \
        else contextlib.nullcontext()
    try:
        with watch:
            problem = _run_cases(request)
    except Exception as error:  # noqa: BLE001 - the judge raised: kvfuzz's problem to report
        return {**record, "status": "error", "what": f"the judge raised {safe_text(error)}"}
    record["ran"] = flag[0] if flagged is not None else watch.ran
    if problem is None:
        return {**record, "status": "survived"}
    return {**record, "status": "killed", **problem}


def close_inherited(fd: int) -> None:
    """A mutant's child must not reach its worker's pipe to the supervisor."""
    try:
        os.close(fd)
    except OSError:
        pass
