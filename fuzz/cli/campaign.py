"""`kvfuzz fuzz` (coverage-guided campaigns) and `kvfuzz corpus merge|minimize`, as subcommands
added to the `kvfuzz` parser by `add_parsers`; `run(args)` dispatches them."""

from __future__ import annotations

import argparse
import sys

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.cli.args import duration, jobs, seconds, size
from kvfuzz.fuzz.campaign.specs import REPO, SPECS
from kvfuzz.fuzz.engine.impl_process import DEFAULT_MEMORY
from kvfuzz.fuzz.engine.isolation import DEFAULT_TIMEOUT
from kvfuzz.fuzz.engine.stop_signals import INTERRUPTED, interrupting
from kvfuzz.fuzz.engine.transcript import size_text

COMMANDS = ("fuzz", "corpus")
EPILOG = """examples:
  kvfuzz fuzz extend --time 10m --jobs 2       every bundled implementation, seeded from corpus/
  kvfuzz fuzz extend --impl mutant.owner_left_bisect --time 2m --corpus /tmp/found
  kvfuzz fuzz decode --time 30s -- -max_len=2048 -seed=7     libFuzzer flags after --
  kvfuzz fuzz case_loader --time 1m            the JSON loader on malformed case files
exit status: 0 nothing found, 1 a failure found (minimised, saved once per signature),
2 bad usage or a worker crash that saved nothing (see the work directory's logs/),
130 interrupted (Ctrl-C, SIGINT or SIGTERM: the findings so far are saved, the summary prints)"""


def _with_flags_after_dashes(base):
    """The parser class of `kvfuzz fuzz`: everything after `--` is libFuzzer's, kept verbatim
    in `args.flags` (argparse alone would try to read `-max_len=...` as its own option)."""

    class FuzzParser(base):
        def parse_known_args(self, args=None, namespace=None):
            args = list(args or [])
            flags = args[args.index("--") + 1:] if "--" in args else []
            args = args[:args.index("--")] if "--" in args else args
            namespace, extras = super().parse_known_args(args, namespace)
            namespace.flags = flags
            return namespace, extras
    return FuzzParser


def add_parsers(commands) -> None:
    fuzz = commands.add_parser(
        "fuzz", help="coverage-guided campaign (atheris) against the oracle", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="kvfuzz fuzz TARGET [options] [-- LIBFUZZER_FLAG ...]")
    fuzz.add_argument("target", choices=list(SPECS))
    fuzz.add_argument("--impl", action="append", default=[], metavar="NAME|module:attr",
                      help="implementation to fuzz (repeatable; default: every bundled one)")
    fuzz.add_argument("--time", type=duration, default=600.0, help="wall time (default 10m)")
    fuzz.add_argument("--jobs", type=jobs, default=1, help="parallel workers (1 to 64)")
    fuzz.add_argument("--corpus", default=corpus.DEFAULT_DIR,
                      help="JSON corpus: seeds come from here, minimised failures go here")
    fuzz.add_argument("--work", default=None,
                      help="working directory (default .kvfuzz/TARGET, gitignored)")
    fuzz.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                      help="an input that runs longer stops its worker and is saved as a "
                           f"finding ('timed out'; default {DEFAULT_TIMEOUT:g})")
    fuzz.add_argument("--memory", type=size, default=DEFAULT_MEMORY, metavar="SIZE",
                      help="resident memory a worker may use (libFuzzer's -rss_limit_mb); past "
                           "it, its input is saved as a finding and re-run apart under the same "
                           f"limit (default {size_text(DEFAULT_MEMORY)})")
    fuzz.__class__ = _with_flags_after_dashes(type(fuzz))
    tools = commands.add_parser("corpus", help="merge or minimize a case corpus")
    actions = tools.add_subparsers(dest="action", required=True, parser_class=type(tools))
    merge = actions.add_parser("merge", help="add cases from other directories (dedup by content)")
    merge.add_argument("sources", nargs="+", metavar="DIR")
    merge.add_argument("--into", default=corpus.DEFAULT_DIR)
    minimize = actions.add_parser("minimize", help="keep a subset covering the same features")
    minimize.add_argument("directory", nargs="?", default=corpus.DEFAULT_DIR)
    minimize.add_argument("--impl", action="append", default=[], metavar="NAME|module:attr",
                          help="implementations whose signatures to keep (default: all "
                               "registered, mutants included)")
    minimize.add_argument("--dry-run", action="store_true", help="list, remove nothing")


def run(args, out=sys.stdout) -> int:
    if args.command == "corpus":
        from kvfuzz.fuzz.cli.corpus_tools import merge, minimize
        try:
            with interrupting():
                if args.action == "merge":
                    return merge(args.sources, args.into, out)
                return minimize(args.directory, args.impl, args.dry_run, out)
        except KeyboardInterrupt:
            what = ("the files merged so far are whole" if args.action == "merge" else
                    "no file was removed but those listed above")
            print(f"kvfuzz corpus {args.action}: interrupted; {what}", file=sys.stderr)
            return INTERRUPTED
    return run_fuzz(args)


def run_fuzz(args) -> int:
    from kvfuzz.fuzz.campaign.supervisor import Campaign
    from kvfuzz.impl.registry import ImplementationError

    spec = SPECS[args.target]
    if args.impl and not spec.takes_impl:
        raise ImplementationError(f"target {args.target!r} takes no --impl")
    spec.check_impls(args.impl)
    if spec.takes_impl and not args.impl:  # nothing to fuzz without the target's packages
        spec.target.catalogue.defaults_or_error()
    bad = [flag for flag in args.flags if not flag.startswith("-")]
    if bad:
        print(f"kvfuzz: error: libFuzzer flags go after -- and start with '-', got {bad[0]!r}",
              file=sys.stderr)
        return 2
    work = args.work or REPO / ".kvfuzz" / args.target
    corpus.check_writable(work, "--work")
    return Campaign(spec, args.impl, args.time, args.jobs, args.corpus, work, args.flags,
                    timeout=args.timeout, memory=args.memory).run()
