"""The `kvfuzz` command: list targets and implementations, diff them against the oracle on
seeded cases, replay saved cases. Exit status: 0 agree, 1 divergence, 2 bad usage or input."""

from __future__ import annotations

import argparse
import sys

from kvfuzz.fuzz import bench_command, corpus, fuzz_command, targets as plugins
from kvfuzz.impl.registry import ImplementationError, implementations, load_attribute, targets
from kvfuzz.strategies.paged.case import CaseFormatError

EPILOG = """examples:
  kvfuzz diff extend --cases 20000            every bundled implementation vs the oracle
  kvfuzz diff decode --impl torch.vectorized --jobs 2
  kvfuzz diff extend --impl mypkg.alloc:alloc_extend   your own function, same signature
  kvfuzz replay corpus/                       every saved case, every bundled implementation
exit status: 0 all agree, 1 a divergence was found (saved under corpus/), 2 bad usage or input"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2, no usage dump
        print(f"kvfuzz: error: {message} (see kvfuzz --help)", file=sys.stderr)
        raise SystemExit(2)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="kvfuzz", description=__doc__, epilog=EPILOG,
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("list", help="targets and registered implementations")
    diff = commands.add_parser("diff", help="seeded cases: implementations vs the oracle")
    diff.add_argument("target", nargs="?", default="all",
                      choices=["all"] + targets() + sorted(plugins.PLUGINS),
                      help="what to test (default: all, one after another)")
    diff.add_argument("--impl", action="append", default=[], metavar="NAME|module:attr",
                      help="implementation to test (repeatable; default: every bundled one)")
    diff.add_argument("--cases", type=positive, default=None,
                      help="cases (traces) per implementation; default: extend and decode "
                           "2,000, allocator 200, compaction 100")
    diff.add_argument("--seed", type=int, default=0, help="seed of the case generator")
    diff.add_argument("--start", type=int, default=0,
                      help="first case index (with --cases 1: regenerate one reported case)")
    diff.add_argument("--jobs", type=positive, default=1, help="worker processes")
    diff.add_argument("--corpus", default=corpus.DEFAULT_DIR, help="where divergences are saved")
    diff.add_argument("--device", default="cpu", help="torch device for implementations")
    replay = commands.add_parser("replay", help="run saved case files (or directories)")
    replay.add_argument("paths", nargs="+", metavar="PATH")
    replay.add_argument("--impl", action="append", default=[], metavar="NAME|module:attr")
    replay.add_argument("--device", default="cpu")
    fuzz_command.add_parsers(commands)
    bench_command.add_parser(commands)
    return top


def cmd_list() -> int:
    rows = {target: [(impl.name, impl.kind, impl.summary) for impl in implementations(target)]
            for target in targets()}
    for name, plugin in sorted(plugins.PLUGINS.items()):
        rows[name] = load_attribute(plugin.describe)() if plugin.describe else []
    width = max([32] + [len(row[0]) + 1 for entries in rows.values() for row in entries])
    for target, entries in rows.items():
        print(f"{target}:" if entries else f"{target}: (kvfuzz diff {target} --help)")
        for name, kind, summary in entries:
            print(f"  {name:<{width}} {kind:<8} {summary}")
    print("outside implementations: --impl package.module:attr (same signature as upstream)")
    return 0


# A trace runs hundreds of operations: fewer of them by default keeps `kvfuzz diff` (every
# target, the README's main job) to a few minutes on two cores.
DEFAULT_CASES = {"extend": 2000, "decode": 2000, "allocator": 200, "compaction": 100}


def cmd_diff(args) -> int:
    if args.cases is None and args.target != "all":
        args = argparse.Namespace(**{**vars(args), "cases": DEFAULT_CASES.get(args.target, 200)})
    if args.target == "all":
        status = 0
        for target in targets() + sorted(plugins.PLUGINS):
            status = max(status, cmd_diff(argparse.Namespace(**{**vars(args), "target": target})))
            if status == 130:  # Ctrl-C stops the whole run, not only the current target
                break
        return status
    if args.target in plugins.PLUGINS:
        return load_attribute(plugins.PLUGINS[args.target].diff)(args)
    from kvfuzz.fuzz.diff import diff_main
    return diff_main(args)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command in ("diff", "replay", "fuzz"):
        # Before any implementation is imported: a named upstream module may import Triton, and
        # Triton fixes interpreted-or-compiled when its kernels are defined.
        from kvfuzz.impl.triton_env import use_interpreter_without_cuda
        use_interpreter_without_cuda()
    try:
        if args.command in fuzz_command.COMMANDS:
            return fuzz_command.run(args)
        if args.command == "bench":
            return bench_command.run(args)
        if args.command == "list":
            return cmd_list()
        if args.command == "diff":
            return cmd_diff(args)
        from kvfuzz.fuzz.replay import replay
        return replay(args.paths, args.impl, device=args.device)
    except (ImplementationError, CaseFormatError, corpus.CorpusError) as error:
        print(f"kvfuzz: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
