"""The `kvfuzz` command: list targets and implementations, diff them against the oracle on
seeded inputs, replay saved inputs, fuzz (atheris campaigns), tend the corpus, benchmark, guard
a live engine's object.
Exit status: 0 agree, 1 divergence, 2 bad usage or input."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from kvfuzz.fuzz.cli import campaign as campaign_command
from kvfuzz.fuzz.cli import guard as guard_command
from kvfuzz.fuzz.cli import history as history_command
from kvfuzz.fuzz.cli import mutate as mutate_command
from kvfuzz.fuzz.cli.profiles import check_profile, known_profiles
from kvfuzz.fuzz.engine.containment import become_subreaper, sweep
from kvfuzz.fuzz.cli import upstream
from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.cli.args import (Parser, UsageError, check_device, index, jobs, positive,
                              seconds, size)
from kvfuzz.fuzz.engine.impl_process import DEFAULT_MEMORY
from kvfuzz.fuzz.engine.transcript import size_text
from kvfuzz.fuzz.engine.isolation import DEFAULT_TIMEOUT
from kvfuzz.fuzz.engine.stop_signals import INTERRUPTED, interrupting
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.fuzz.engine.mutation.supervisor import MutationError
from kvfuzz.impl.registry import ImplementationError
from kvfuzz.strategies.inputs import FormatError

EPILOG = """examples:
  kvfuzz diff extend --cases 20000            every bundled implementation vs the oracle
  kvfuzz diff decode --impl torch.vectorized --jobs 2
  kvfuzz diff extend --impl mypkg.alloc:alloc_extend   your own function, same signature
  kvfuzz replay corpus/                       every saved input, every bundled implementation
  kvfuzz diff allocator --impl mypkg.pool:Allocator --keep-going   every distinct divergence
  kvfuzz replay corpus/extend-0865d3e6d61a0610.json --impl mutant.no_clamp --pdb   debug it
  kvfuzz history --sglang 0.5.17,0.5.20 --vllm 0.28.0   every upstream class on older releases
exit status: 0 all agree, 1 a divergence was found (saved under corpus/), 2 bad usage or input,
130 interrupted (Ctrl-C, SIGINT or SIGTERM: every finding so far is saved, the summary prints);
replay --in-process has no isolation: a crash ends it by its signal"""
BENCH = "kvfuzz.bench.command"  # imported only when run: nothing in fuzz/ imports bench/
MEMORY_HELP = (f"resident memory each implementation's process may use (e.g. 2G, 512M); past "
               f"it, the input is the implementation's divergence ('exceeded the memory limit'; "
               f"default {size_text(DEFAULT_MEMORY)})")
TIMEOUT_HELP = (f"an input that runs longer is the implementation's divergence ('timed out'); "
                f"implementations run in supervised worker processes, so a crash is one too "
                f"(default {DEFAULT_TIMEOUT:g})")


PROFILE_HELP = (
    "the inputs of this generator profile alone, from a seeded stream of its own (input I of "
    "seed S: --profile NAME --seed S --start I --cases 1), where the target's mix draws each "
    "input's profile; a report's replay line names it; one target only; " + known_profiles())


class _Version(argparse.Action):
    """--version, read when asked (the engines' metadata), not each time the parser is built."""

    def __call__(self, parser, namespace, values, option_string=None):
        from kvfuzz.fuzz.cli.version import version_text

        print(version_text())
        parser.exit()


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="kvfuzz", description=__doc__, epilog=EPILOG,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action=_Version, nargs=0,
                     help="kvfuzz's version, and Python's, torch's and the engines' it runs")
    commands = top.add_subparsers(dest="command", required=True, parser_class=Parser)
    commands.add_parser("list", help="targets and registered implementations")
    diff = commands.add_parser("diff", help="seeded inputs: implementations vs the oracle")
    diff.add_argument("target", nargs="?", default="all", choices=["all", *TARGETS],
                      help="what to test (default: all, one after another)")
    diff.add_argument("--impl", action="append", default=[], metavar="NAME|module:attr",
                      help="implementation to test (repeatable; default: every bundled one)")
    defaults = ", ".join(f"{name} {t.settings.default_cases:,}" for name, t in TARGETS.items())
    diff.add_argument("--cases", type=positive, default=None,
                      help=f"cases (traces) per implementation; default: {defaults}")
    diff.add_argument("--seed", type=int, default=0, help="seed of the case generator")
    diff.add_argument("--start", type=index, default=0,
                      help="first case index (with --cases 1: regenerate one reported case)")
    diff.add_argument("--jobs", type=jobs, default=1, help="worker processes (1 to 64)")
    diff.add_argument("--profile", metavar="NAME", help=PROFILE_HELP)
    diff.add_argument("--corpus", default=corpus.DEFAULT_DIR, help="where divergences are saved")
    diff.add_argument("--device", default="cpu", help="torch device for implementations")
    diff.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                      help=TIMEOUT_HELP)
    diff.add_argument("--memory", type=size, default=DEFAULT_MEMORY, metavar="SIZE",
                      help=MEMORY_HELP)
    diff.add_argument("--upstream", action="store_true", help=upstream.HELP)
    diff.add_argument("--keep-going", action="store_true",
                      help="go on after a divergence: every input is checked, and each distinct "
                           "divergence of an implementation (its signature: the op type and "
                           "problem of a trace, the kind and phase of a case, how a process "
                           "crashed) is reported, shrunk and saved")
    replay = commands.add_parser("replay", help="run saved case files (or directories)")
    replay.add_argument("paths", nargs="+", metavar="PATH")
    replay.add_argument("--impl", action="append", default=[], metavar="NAME|module:attr",
                        help="implementation to run (repeatable; each applies to the files of "
                             "its target; default: every bundled one)")
    replay.add_argument("--device", default="cpu")
    replay.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=TIMEOUT_HELP)
    replay.add_argument("--memory", type=size, default=DEFAULT_MEMORY, metavar="SIZE",
                        help=MEMORY_HELP)
    replay.add_argument("--in-process", action="store_true",
                        help="run the one input given in this process, without worker "
                             "processes, timeout or isolation: for a debugger; an "
                             "implementation's exception is printed with its whole traceback, "
                             "a crash with faulthandler's stack")
    replay.add_argument("--pdb", action="store_true",
                        help="with --in-process (implied): open pdb post mortem where the "
                             "implementation raised")
    campaign_command.add_parsers(commands)
    upstream.add_parser(commands)
    guard_command.add_parser(commands)
    mutate_command.add_parser(commands)
    history_command.add_parser(commands)
    commands.add_parser("bench", add_help=False, prefix_chars="\0",
                        help="performance tables (CPU figures; kvfuzz bench --help)"
                        ).add_argument("rest", nargs=argparse.REMAINDER)
    return top


def check_usage(args) -> None:
    """What can be checked before anything runs, so nothing runs (or is written) in vain."""
    if getattr(args, "device", "cpu") != "cpu":
        check_device(args.device)
    if args.command in ("diff", "fuzz"):
        corpus.check_writable(args.corpus)
    if args.command == "corpus" and args.action == "merge":
        corpus.check_writable(args.into, "--into")


def cmd_list() -> int:
    """Each target's catalogue: name, kind (ours, upstream, mutant, ...), `*` where it runs by
    default, what it is."""
    rows = {name: target.catalogue.implementations for name, target in TARGETS.items()}
    width = max([32] + [len(impl.name) + 1 for impls in rows.values() for impl in impls])
    for name, impls in rows.items():
        print(f"{name}:")
        for impl in impls:
            kind = impl.kind + ("*" if impl.runs_by_default else "")
            print(f"  {impl.name:<{width}} {kind:<9} {impl.summary}")
    print("* runs by default (kvfuzz diff without --impl)")
    print("yours: --impl package.module:attr (the signature the target calls, as upstream's)")
    return 0


def cmd_diff(args, out=None) -> int:
    """Exit status: 0 all agree, 1 a divergence (saved and reported), 130 interrupted."""
    from kvfuzz.fuzz.engine.diff import diff_target
    from kvfuzz.fuzz.engine.run import RunOptions

    out = out or sys.stderr  # looked up now: a test may have replaced it
    names = list(TARGETS) if args.target == "all" else [args.target]
    check_profile(args.target, args.profile)
    with_upstream = args.upstream and not args.impl and upstream.ensure(out)
    # Resolve every --impl of every target first: a typo fails in one line before any run.
    # A target named on its own with nothing to run (its packages missing) is a usage error;
    # among every target it is said and skipped below.
    runs = []
    for target in (TARGETS[name] for name in names):
        catalogue = target.catalogue
        runs.append((target, [catalogue.resolve(spec) for spec in args.impl] or (
            catalogue.defaults(with_upstream) if args.target == "all" or with_upstream
            else catalogue.defaults_or_error())))
    status = 0
    for target, impls in runs:
        for name, why in target.catalogue.unsupported():  # the installed release cannot
            print(f"{target.name}: {name} not run: {why}", file=out)
        if not impls:  # every target: one whose packages are missing is said, not failed
            print(f"{target.name}: not run: {target.catalogue.not_run_reason()}", file=out)
            continue
        options = RunOptions(args.cases or target.settings.default_cases, args.seed,
                             args.start, args.jobs, args.device, args.timeout, args.corpus,
                             args.memory, args.keep_going, args.profile)
        if args.profile is not None:  # said first: the summary's counts are of it alone
            print(f"{target.name}: profile {args.profile!r} alone (generator "
                  f"{target.alone(args.profile).generator.generator.name})", file=out)
        status = max(status, diff_target(target, impls, options, out))
        if status == INTERRUPTED:  # Ctrl-C stops the whole run, not only this target
            break
    return status


def cmd_replay(args) -> int:
    from kvfuzz.fuzz.engine.replay import replay, replay_in_process

    if not (args.in_process or args.pdb):
        return replay(args.paths, args.impl, device=args.device, timeout=args.timeout,
                      memory=args.memory)
    files = corpus.input_files(args.paths)
    if len(files) != 1:
        raise UsageError(f"--{'pdb' if args.pdb else 'in-process'} runs one input: "
                         f"{' '.join(args.paths)} holds {len(files)} files; name one")
    return replay_in_process(files[0], args.impl, device=args.device, debug=args.pdb)


def command() -> int:
    """The `kvfuzz` program: `main`, in a process of its own. Processes an implementation
    starts stay kvfuzz's descendants, whatever they do, and none outlives the command
    (`containment.py`); a library caller of `main` keeps its own children."""
    become_subreaper()
    try:
        return main()
    finally:
        sweep()


def main(argv=None) -> int:
    try:
        # SIGINT and SIGTERM stop every command, whatever the process inherited (an ignored
        # SIGINT included); a command that runs implementations reports what it had done.
        with interrupting():
            return run(parse(sys.argv[1:] if argv is None else list(argv)))
    except BrokenPipeError:  # `kvfuzz ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # before a command's own run began (loading, resolving)
        print("kvfuzz: interrupted", file=sys.stderr)
        return INTERRUPTED


def parse(argv: list[str]):
    """The command line; `kvfuzz guard ... -- COMMAND`'s command is everything after the `--`
    (its options are the command's, whatever kvfuzz's options are called)."""
    after = None
    if argv[:1] == ["guard"] and "--" in argv:
        cut = argv.index("--")
        argv, after = argv[:cut], argv[cut + 1:]
    args = parser().parse_args(argv)
    if after is not None:
        args.argv = args.argv + after
    return args


def run(args) -> int:
    if args.command == "bench":
        return importlib.import_module(BENCH).main(args.rest)
    if args.command in ("diff", "replay", "fuzz", "mutate"):
        # Before any implementation is imported: a named upstream module may import Triton, and
        # Triton fixes interpreted-or-compiled when its kernels are defined.
        from kvfuzz.impl.triton_env import use_interpreter_without_cuda
        use_interpreter_without_cuda()
    try:
        check_usage(args)
        if args.command in campaign_command.COMMANDS:
            return campaign_command.run(args)
        if args.command == "list":
            return cmd_list()
        if args.command == "upstream":
            return upstream.run(args)
        if args.command == "guard":
            return guard_command.run(args)
        if args.command == "mutate":
            return mutate_command.run(args)
        if args.command == "history":
            return history_command.run(args)
        if args.command == "diff":
            return cmd_diff(args)
        return cmd_replay(args)
    except (ImplementationError, FormatError, corpus.CorpusError, UsageError,
            MutationError) as error:
        print(f"kvfuzz: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
