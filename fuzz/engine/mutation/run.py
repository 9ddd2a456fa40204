"""`kvfuzz mutate`'s run: plan in one worker, choose the mutants (all, a seeded sample, or one),
resume from the results file, hand the reached ones out to `jobs` workers, rerun in a fresh
worker the survivors whose lines never ran after the fork, report."""

from __future__ import annotations

import json
import random
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import kvfuzz.impl
from kvfuzz.fuzz.engine.mutation import report as reporting
from kvfuzz.fuzz.engine.mutation.also_run import TestCommand, asked
from kvfuzz.fuzz.engine.mutation.hand_out import hand_out
from kvfuzz.fuzz.engine.mutation.operators import VERSION as OPERATORS_VERSION
from kvfuzz.fuzz.engine.mutation.results import ResultsFile, default_path
from kvfuzz.fuzz.engine.mutation.supervisor import MutationError, Zygote, wait_plan
from kvfuzz.fuzz.engine.mutation.worker import Request
from kvfuzz.fuzz.engine.stop_signals import INTERRUPTED, held


@dataclass
class Options:
    target: str
    impl: str
    scopes: tuple = ()
    operators: tuple = ("*",)
    cases: int = 200
    seed: int = 0
    start: int = 0
    sample: int | None = None
    time: float | None = None
    jobs: int = 1
    results: str | None = None
    only: str | None = None
    json: str | None = None
    fail_under: float | None = None
    timeout: float | None = None
    memory: int = 4 << 30
    also_run: str | None = None
    also_timeout: float | None = None
    equivalents: str | None = None
    profile: str | None = None  # the generator profile whose stream alone makes the cases
    declared: dict = field(default_factory=dict)  # filled from `equivalents` and kvfuzz's list


DECLARED = Path(kvfuzz.impl.__file__).parent / "equivalent_mutants.json"


def declared_equivalents(extra: str | None = None) -> dict:
    """{mutant id: reason}: kvfuzz's list of upstream mutants no caller can tell apart, and the
    user's (`--equivalents FILE`, the same format)."""
    found = {}
    for path in filter(None, (DECLARED, extra)):
        try:
            data = json.loads(Path(path).read_text())
            found.update({str(k): str(v) for k, v in data["mutants"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise MutationError(f"--equivalents {path}: expected a JSON object with a "
                                f"\"mutants\" object of id -> reason ({error})") from None
    return found


def relabel(result: dict, reason: str | None) -> dict:
    """A survivor declared equivalent is one; a declared mutant that kvfuzz kills stays killed
    (the declaration is then wrong, and the report shows it)."""
    if reason is not None and result.get("status") == "survived":
        return {**result, "status": "equivalent", "what": f"declared: {reason}"}
    return result


def report_records(chosen, done: dict, declared: dict) -> list:
    """The report's record of each chosen mutant. A verdict read back from the results file is
    relabelled by today's declared list too: a survivor declared equivalent after its run (the
    usual order: run, read the survivor, declare it) is reported so without running it again."""
    return [relabel(done[m.id], declared.get(m.id)) if m.id in done
            else _record(m, {"status": "not run"}) for m in chosen]


def _record(mutant, result: dict) -> dict:
    return {"id": mutant.id, "module": mutant.module, "line": mutant.line,
            "function": mutant.function, "operator": mutant.operator, **result}


def _command(options: Options) -> str:
    parts = ["kvfuzz", "mutate", options.target, "--impl", options.impl,
             "--cases", str(options.cases), "--seed", str(options.seed)]
    if options.profile is not None:  # case I is the profile's stream's, not the mix's
        parts += ["--profile", options.profile]
    if options.start:  # the cases the mutant ran, not the first ones
        parts += ["--start", str(options.start)]
    for scope in options.scopes:
        parts += ["--scope", scope]
    return shlex.join(parts) + " --only {id}"


def run_identity(options: Options, plan) -> dict:
    """What a results file's verdicts hold for (its header; the default file's name hashes it):
    a run with other options, cases or source starts the file over instead of resuming it."""
    identity = {"target": options.target, "impl": options.impl, "scopes": plan.scopes,
                "operators": list(options.operators), "cases": options.cases,
                "seed": options.seed, "start": options.start, "digest": plan.digest,
                "operators_version": OPERATORS_VERSION, "stream": plan.stream}
    # The profile by name too, not only through its stream's name (which differs from the
    # mix's today): the file says which `--profile` it is for whatever streams are named. Only
    # when given, so a run of the mix resumes the files written before `--profile` existed.
    if options.profile is not None:
        identity["profile"] = options.profile
    return identity


def _diff_command(options: Options, case: int) -> str:
    """The `kvfuzz diff` line that regenerates case `case` of this run."""
    profile = [] if options.profile is None else ["--profile", options.profile]
    return shlex.join(["kvfuzz", "diff", options.target, *profile, "--seed", str(options.seed),
                       "--start", str(case), "--cases", "1"])


def choose(mutants: list, options: Options) -> list:
    if options.only is not None:
        found = [m for m in mutants if m.id == options.only]
        if not found:
            raise MutationError(f"--only {options.only}: no such mutant in this scope (the ids "
                                f"are module:line:column:Operator:occurrence)")
        return found
    if options.sample is not None and options.sample < len(mutants):
        return sorted(random.Random(options.seed).sample(mutants, options.sample),
                      key=lambda m: (m.module, m.line, m.column, m.operator, m.occurrence))
    return mutants


def mutate(options: Options, out=None) -> int:
    out = out or sys.stderr
    options.declared = declared_equivalents(options.equivalents)
    request = Request(options.target, options.impl, tuple(options.scopes),
                      tuple(options.operators), options.cases, options.seed, options.start,
                      options.memory, profile=options.profile)
    began = time.monotonic()
    zygotes, results = [Zygote(request)], None
    try:
        plan = wait_plan(zygotes[0])
        if plan.problem:
            raise MutationError(plan.problem)
        if not plan.mutants:
            raise MutationError(f"no mutants in {', '.join(plan.scopes)} (no function body "
                                f"there, or --operator matches none)")
        chosen = choose(plan.mutants, options)
        timeout = options.timeout or max(10.0, 3 * plan.seconds + 5)
        identity = run_identity(options, plan)
        path = options.results or default_path(options.target, identity)
        if options.only is not None:  # one mutant on its own: nothing of the run's file changes
            path = Path(tempfile.mkdtemp(prefix="kvfuzz-only-")) / "only.jsonl"
        results = ResultsFile(path, identity)
        done, note = results.load()
        if note:
            print(note, file=out)
        if options.profile is not None:  # said first: every case is of it alone
            print(f"mutate {options.target}: profile {options.profile!r} alone (generator "
                  f"{plan.stream})", file=out)
        print(f"mutate {options.target}: {len(chosen)} of {len(plan.mutants)} mutants in "
              f"{', '.join(plan.scopes)}; unmutated run {plan.seconds:.1f} s; "
              f"{options.jobs} worker(s); results: {results.path}", file=out)
        status = _run(chosen, plan, done, results, zygotes, request, options, timeout, began,
                      out) or _rerun_fresh(chosen, plan, done, results, zygotes, request,
                                           options, timeout, began, out)
        for zygote in zygotes:  # the tests need the cores
            zygote.stop()
        if options.also_run and not status:
            status = _also_run(chosen, done, results, options, out)
    finally:
        for zygote in zygotes:
            zygote.stop()
        if results is not None:
            results.close()
    records = report_records(chosen, done, options.declared)
    meta = {"target": options.target, "impl": options.impl, "cases": options.cases,
            "seed": options.seed, "profile": options.profile, "mutants": len(plan.mutants),
            "run": len(chosen),
            "scopes": plan.scopes, "seconds": round(time.monotonic() - began, 1)}
    summary = reporting.summary(records, meta)
    print("\n".join(reporting.lines(summary, _command(options))))
    if options.only is not None:
        for r in records:
            print(f"{r['status']}: {r.get('what', '')}" + (
                f" (case {r['case']}: {_diff_command(options, r['case'])} shows the case)"
                if "case" in r else ""))
    if options.json:
        text = json.dumps(summary, indent=1, sort_keys=True)
        if options.json == "-":
            print(text)
        else:
            with open(options.json, "w") as handle:
                handle.write(text + "\n")
    if status:
        return status
    if options.fail_under is not None and (summary["score"] or 0) * 100 < options.fail_under:
        print(f"kvfuzz mutate: score {reporting.percent(summary['score'])} is under "
              f"--fail-under {options.fail_under:g}%", file=out)
        return 1
    return 0


def _run(chosen, plan, done, results, zygotes, request, options, timeout, began, out) -> int:
    """Every chosen mutant not done yet; 130 when interrupted (what is done is in the file)."""
    for mutant in chosen:  # what is not run: its lines never run, or it changes a message
        status = "cosmetic" if mutant.cosmetic else (
            None if plan.reached.get(mutant.id, True) else "not reached")
        if mutant.id not in done and status is not None:
            done[mutant.id] = _record(mutant, {"status": status})
            results.add(done[mutant.id])

    def finish(mutant, result: dict) -> None:
        done[mutant.id] = _record(mutant, relabel(result, options.declared.get(mutant.id)))
        results.add(done[mutant.id])

    pending = [m for m in chosen if m.id not in done]
    quiet = Request(**{**request.__dict__, "trace": False})
    return hand_out(pending, zygotes, quiet, finish, options, timeout, began, results, out)


def needs_fresh(record: dict, reached: bool) -> bool:
    """A mutant whose forked verdict is hollow: it survived (or was declared equivalent on
    surviving), its lines ran in the unmutated run before the fork, and never in its child."""
    return (reached and record.get("ran") is False and not record.get("fresh")
            and record.get("status") in ("survived", "equivalent"))


def _rerun_fresh(chosen, plan, done, results, zygotes, request, options, timeout, began,
                 out) -> int:
    """Each hollow survivor again, in a child of a worker that ran no case before placing it
    (a once-a-process set-up the forked worker did is still to do there); its verdict counts,
    the forked one is kept as `forked`. Resumable like the first pass: it picks its mutants
    from the records."""
    todo = [m for m in chosen if m.id in done
            and needs_fresh(done[m.id], plan.reached.get(m.id, False))]
    if not todo:
        return 0
    if options.time is not None and time.monotonic() - began > options.time:
        print(f"mutate: --time reached; {len(todo)} survivors not rerun fresh (rerun to "
              f"resume)", file=out)
        return 0
    print(f"mutate: {len(todo)} survivor(s) never ran their lines after the fork (a set-up "
          f"the worker did before it?): rerun in a fresh process", file=out)
    for zygote in zygotes:  # their cores and memory go to the fresh workers
        zygote.stop()
    zygotes.clear()

    def finish(mutant, result: dict) -> None:
        result = {**result, "fresh": True, "forked": done[mutant.id]["status"]}
        added = _record(mutant, relabel(result, options.declared.get(mutant.id)))
        done[mutant.id] = {**done[mutant.id], **added}
        results.add(added)

    fresh = Request(**{**request.__dict__, "trace": False, "fresh": True})
    return hand_out(todo, zygotes, fresh, finish, options, timeout, began, results, out)


def _also_run(chosen, done, results, options, out) -> int:
    """The user's test command on every mutant kvfuzz ran or could not reach; 130 when
    interrupted. A verdict is kept with the command it is for."""
    tests, pool = TestCommand(options.also_run), None
    try:
        verdict, seconds, last = tests.run(None, options.also_timeout or 3600)
        if verdict != "passed":
            raise MutationError(f"--also-run: the command fails on the unmutated code "
                                f"({last or verdict}); only tests that pass on the release "
                                f"count")
        timeout = options.also_timeout or max(30.0, 3 * seconds + 10)
        todo = [m for m in chosen if m.id in done and asked(done[m.id])
                and done[m.id].get("tests_command") != options.also_run]
        print(f"mutate: --also-run on {len(todo)} mutants ({seconds:.1f} s unmutated, "
              f"{options.jobs} at a time)", file=out)
        # Not a `with` block: its exit waits for every running command before an interrupt
        # is handled; `tests.stop()` must come first.
        pool = ThreadPoolExecutor(options.jobs)
        running = {pool.submit(tests.run, m, timeout): m for m in todo}
        for count, future in enumerate(as_completed(running), 1):
            mutant = running[future]
            verdict = future.result()[0]
            if verdict == "stopped":
                continue
            added = {"id": mutant.id, "tests": "survived" if verdict == "passed" else
                     "killed", "tests_command": options.also_run}
            with held():  # a verdict is recorded whole, or not at all
                done[mutant.id].update(added)
                results.add(added)
            if count % 10 == 0:
                print(f"mutate: --also-run {count}/{len(todo)}", file=out)
    except KeyboardInterrupt:
        print(f"mutate: interrupted; the same command resumes from {results.path}", file=out)
        return INTERRUPTED
    finally:
        tests.stop()  # the commands in flight killed, interrupted or not
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        tests.close()
    return 0
