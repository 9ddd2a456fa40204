"""Every `kvfuzz` command the older-release tests run on one SGLang release, run in ONE process
(`kvfuzz_commands`) the first time a test asks for any of them, its results shared by every
test of the run (each test asserts on its own commands' results, as before).

Why: these tests' seconds were almost all the release's import (torch, then SGLang: some 9 s of
CPU a process); their commands themselves take well under a second to a few seconds. Before,
each test (and each test file) started its own process per release: 29 processes for 10
releases; now 11 (0.5.14 twice, for its environment), each release imported once a run. The
commands are declared where the module is imported (`on(version, ...)`, at collection, so every
xdist worker knows the same batch), and the first test to ask runs the whole batch under a
file lock in a folder all workers share (`tmp_path_factory`'s base); the others read its
results (a worker asking while another runs the batch waits for it: where every CPU is busy,
as `-n auto` keeps them, cheaper than a second import). A command declared twice (the
same argv, by two files) runs once.

A command's `--corpus` folder is `OWN_CORPUS` (each command gets a folder of its own in the
batch's folder, as each test's `tmp_path` was), and a trace it reads may be a `Trace` (written
into the batch's folder before the batch runs). `env=` sets variables for those commands'
process: a batch of its own (kvfuzz reads a release's contract, its environment's switches
included, once a process). A failed batch (its process's exit status, or past its time) fails
every test asking for it, with its message."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

OWN_CORPUS = "<corpus>"  # replaced by a folder of the command's own


@dataclass(frozen=True)
class Trace:
    """A hand-made trace file, written into the batch's folder as `name` before the batch."""
    name: str
    text: str

    @classmethod
    def of(cls, name: str, trace: dict) -> "Trace":
        return cls(name, json.dumps(trace))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def _word(arg) -> str:
    return f"<trace {arg.name} {arg.digest}>" if isinstance(arg, Trace) else str(arg)


def _key(argv: tuple) -> str:
    return json.dumps([_word(arg) for arg in argv])


# (version, ((name, value), ...) of its environment) -> key -> argv
_DECLARED: dict[tuple, dict[str, tuple]] = {}
_RESULTS: dict[tuple, dict[str, subprocess.CompletedProcess]] = {}  # this process's copy


class Commands:
    """Some commands declared on one release: `.results(tmp_path_factory)` gives their
    results (CompletedProcess each), in the order declared."""

    def __init__(self, batch: tuple, commands: list[tuple]):
        self.batch, self.commands = batch, commands

    def results(self, tmp_path_factory) -> list[subprocess.CompletedProcess]:
        done = _batch(self.batch, tmp_path_factory)
        return [done[_key(argv)] for argv in self.commands]


def on(version: str, *commands, env: dict[str, str] | None = None) -> Commands:
    """Declare `commands` (argv tuples) on SGLang `version` (at import: module level), with
    `env` set for their process."""
    batch = (version, tuple(sorted((env or {}).items())))
    declared = _DECLARED.setdefault(batch, {})
    for argv in commands:
        declared.setdefault(_key(tuple(argv)), tuple(argv))
    return Commands(batch, [tuple(argv) for argv in commands])


def _shared_folder(tmp_path_factory) -> Path:
    base = tmp_path_factory.getbasetemp()
    # under xdist each worker's base is <run>/popen-gwN: the run's folder is the shared one
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "release-batches"


def _batch(batch: tuple, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    declared, (version, env) = _DECLARED[batch], batch
    if batch in _RESULTS and all(key in _RESULTS[batch] for key in declared):
        return _RESULTS[batch]
    from tests.radix.test_legacy_release import folder_of  # (it declares a batch too)

    folder = folder_of(version)  # installed (or the test skipped) before any lock is taken
    keys = sorted(declared)
    digest = hashlib.sha256(json.dumps([version, env, keys]).encode()).hexdigest()[:16]
    where = _shared_folder(tmp_path_factory) / f"sglang-{version}-{digest}"
    where.mkdir(parents=True, exist_ok=True)
    with open(where / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker running it: wait for its results
        if (where / "failed.txt").is_file():
            raise AssertionError((where / "failed.txt").read_text())
        if not (where / "results.json").is_file():
            try:
                results = _run(folder, [declared[key] for key in keys], dict(env), where)
            except (AssertionError, subprocess.TimeoutExpired) as error:
                (where / "failed.txt").write_text(f"sglang {version}'s batch: {error}")
                raise
            (where / "results.tmp").write_text(json.dumps(results))
            os.replace(where / "results.tmp", where / "results.json")
        results = json.loads((where / "results.json").read_text())
    _RESULTS[batch] = {key: subprocess.CompletedProcess(argv, status, out, err)
                       for key, (argv, status, out, err) in zip(keys, results)}
    return _RESULTS[batch]


def _run(folder, commands: list[tuple], env: dict, where: Path) -> list:
    from tests.radix.test_legacy_release import kvfuzz_commands

    argvs = []
    for index, command in enumerate(commands):
        argv = []
        for arg in command:
            if isinstance(arg, Trace):
                path = where / f"trace-{arg.digest}" / arg.name  # (two files' names may meet)
                path.parent.mkdir(exist_ok=True)
                path.write_text(arg.text)
                argv.append(str(path))
            elif arg == OWN_CORPUS:
                argv.append(str(where / f"corpus-{index}"))
            else:
                argv.append(str(arg))
        argvs.append(argv)
    # a release's whole batch: some 10 to 60 s of commands after its import, on a loaded host
    # several times that; each command's inputs have their own --timeout
    done = kvfuzz_commands(folder, *argvs, timeout=1500, env=env)
    return [[d.args, d.returncode, d.stdout, d.stderr] for d in done]
