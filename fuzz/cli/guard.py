"""`kvfuzz guard TARGET [options] -- COMMAND ...`: runs COMMAND (an engine, a script) with the
target's live guard switched on where the engine builds the object, in every Python process
the command starts, without a change to the engine's code (fuzz/engine/autoguard/).

    kvfuzz guard kvmanager -- vllm serve ./my-model
    kvfuzz guard kvmanager --record --corpus traces/ -- python my_bench.py
    eval "$(kvfuzz guard kvmanager --env)"        # the same switch, for a shell or a container
"""

from __future__ import annotations

import importlib
import os
import shlex
import sys

from kvfuzz.fuzz.cli.args import UsageError
from kvfuzz.fuzz.engine.autoguard import FOLDER
from kvfuzz.fuzz.targets import TARGETS

GUARDED = [name for name, target in TARGETS.items() if target.live]


def add_parser(commands) -> None:
    guard = commands.add_parser(
        "guard", help="run a command with a target's live guard on inside it",
        description=__doc__.split("\n\n")[0] + " A divergence raises in the engine, its report "
        "on stderr and the calls so far saved under --corpus (kvfuzz replay runs the file); "
        "with --record, each process's calls are saved when it exits.")
    guard.add_argument("target", choices=GUARDED, help="what to guard")
    guard.add_argument("--record", action="store_true",
                       help="record the calls (saved at exit), do not check them")
    guard.add_argument("--corpus", default="corpus", help="where files are saved")
    guard.add_argument("--unsupported", choices=("raise", "stop"), default="raise",
                       help="a call the target's trace cannot model: raise GuardUnsupported "
                            "(default), or say so once and let every call through unchecked")
    guard.add_argument("--env", action="store_true",
                       help="print the environment that switches the guard on (export lines), "
                            "run nothing")
    guard.add_argument("argv", nargs="*", metavar="-- COMMAND",
                       help="the command to run, after --")


def environment(args) -> dict[str, str]:
    module, _, _ = TARGETS[args.target].live.partition(":")
    sites = importlib.import_module(module).SITES
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": FOLDER + (os.pathsep + path if path else ""),
            "KVFUZZ_GUARD_SITES": ",".join(f"{site}={args.target}" for site in sites),
            "KVFUZZ_GUARD_MODE": "record" if args.record else "guard",
            "KVFUZZ_GUARD_CORPUS": os.path.abspath(args.corpus),
            "KVFUZZ_GUARD_UNSUPPORTED": args.unsupported}


def run(args) -> int:
    env = environment(args)
    if args.env:
        for name, value in env.items():
            print(f"export {name}={shlex.quote(value)}")
        return 0
    if not args.argv:
        raise UsageError("guard: no command to run (kvfuzz guard TARGET -- COMMAND ...)")
    os.makedirs(args.corpus, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(args.argv[0], args.argv, {**os.environ, **env})
    except OSError as error:
        raise UsageError(f"guard: cannot run {args.argv[0]!r}: "
                         f"{error.strerror or error}") from None
