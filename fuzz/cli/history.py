"""`kvfuzz history`: every upstream class kvfuzz drives, on a list of SGLang and vLLM releases,
as a release x class table (agree / diverges / crashed / not supported, and why).

Each release is installed apart: `pip download --no-deps` of its wheel, then `pip install
--no-deps --target` into kvfuzz's cache (`<cache>/history/sglang-0.5.17`; `kvfuzz upstream
where` names the cache), never into your environment; what it imports besides comes from
kvfuzz's upstream cache, as for the pinned release. Each class runs as
`kvfuzz diff TARGET --impl ENTRY --keep-going --cases N --seed S` in a process of its own with
the release's folder first on PYTHONPATH (a cell), `--jobs` cells at a time.

    kvfuzz history --sglang 0.5.17,0.5.20 --vllm 0.28.0
    kvfuzz history --vllm 0.25.0-0.29.0 --impl vllm.blockpool --cases 10
    kvfuzz history                      every default release (a long run: resumable)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvfuzz.fuzz.cli.args import UsageError, jobs, positive, seconds
from kvfuzz.fuzz.history import findings, releases, results
from kvfuzz.fuzz.history.run import CASES, TIMEOUT, TRACE_CASES, HistoryError, Options

EPILOG = f"""default releases (on PyPI, one per minor version):
  --sglang {releases.DEFAULT['sglang'][0]}-{releases.DEFAULT['sglang'][-1]}  --vllm {releases.DEFAULT['vllm'][0]}-{releases.DEFAULT['vllm'][-1]}
  (with only one of --sglang/--vllm given, only that package runs)
a cell: agree (every input agreed or was outside the class's contract), diverges (the first
report's what line, its replay line and saved file; every distinct finding listed), crashed
(every finding a process that ended: the stack), not supported (the one line why), error (could
not run; a rerun tries it again).
a release's saved findings (corpus/history/sglang-0.5.10/*.json) are replayed on each class of
their target after its cell, in the same environment: each file still diverges (expected on the
class it was found on), no longer diverges, or is outside the class's contract (table: *).
the results file keeps each cell's verdict as it ends: rerun the same command to resume (cells
done with the same cases, seed and timeout are skipped); logs and findings (corpus files) lie
beside it. Replay a finding with the release's folder first on PYTHONPATH, as the table says.
exit status: 0 every cell has a verdict, 1 a cell could not run, 2 bad usage, 130 interrupted
(every cell done is kept)"""


def add_parser(commands) -> None:
    history = commands.add_parser(
        "history", help="every upstream class on a list of SGLang/vLLM releases: a table",
        description=__doc__.split("\n\n    kvfuzz")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    history.add_argument("--sglang", metavar="RELEASES", default=None,
                         help="SGLang releases: 0.5.17,0.5.20, a range 0.5.13-0.5.17 of the "
                              "default list, or default")
    history.add_argument("--vllm", metavar="RELEASES", default=None,
                         help="vLLM releases, the same way (e.g. 0.28.0 or 0.25.0-0.29.0)")
    history.add_argument("--impl", action="append", default=[], metavar="ENTRY",
                         help="only this class (repeatable): an entry name of kvfuzz list "
                              "(sglang.paged) or target/entry (extend/sglang.naive); a kernel "
                              "entry (sglang.triton) runs only when named")
    history.add_argument("--cases", type=positive, default=None,
                         help=f"inputs per cell (default: {TRACE_CASES} traces; "
                              + ", ".join(f"{t} {n}" for t, n in CASES.items()) + ")")
    history.add_argument("--seed", type=int, default=0, help="seed of every cell's generator")
    history.add_argument("--timeout", type=seconds, default=TIMEOUT, metavar="SECONDS",
                         help=f"per input (default {TIMEOUT:g}: old releases launch Triton "
                              f"kernels, interpreted on CPU)")
    history.add_argument("--jobs", type=jobs, default=1, help="cells run at once")
    history.add_argument("--results", type=Path, default=results.DEFAULT, metavar="FILE",
                         help=f"the results file, resumed when rerun (default {results.DEFAULT})")
    history.add_argument("--json", default=None, metavar="FILE",
                         help="the table as JSON to FILE ('-': stdout)")
    history.add_argument("--picture", type=Path, default=None, metavar="PNG",
                         help="the heat map (default: the results file's name with .png; "
                              "drawn where matplotlib is installed)")
    history.add_argument("--rerun", action="store_true",
                         help="run every cell again, even those the results file has (after "
                              "kvfuzz or a release's folder changed); their new verdicts replace "
                              "the old")
    history.add_argument("--findings", type=Path, default=findings.DEFAULT, metavar="DIR",
                         help="saved findings replayed on their own release: each file of "
                              "DIR/<package>-<version>/ on every class of its target, after the "
                              f"cell (default {findings.DEFAULT}, where it exists)")
    history.add_argument("--no-findings", action="store_true",
                         help="replay no saved findings")
    history.add_argument("--find-links", default=None, metavar="DIR",
                         help="wheels already on disk, looked at before PyPI (pip's option)")


def options(args) -> Options:
    """The command line as `Options`; `UsageError` (one line) when it cannot run."""
    asked = {"sglang": args.sglang, "vllm": args.vllm}
    if not any(asked.values()):
        asked = dict.fromkeys(asked, "default")
    chosen = []
    try:
        for package, text in asked.items():
            if text:
                chosen += releases.parse_list(package, text)
    except releases.ReleaseError as error:
        raise UsageError(str(error)) from None
    if args.find_links and not Path(args.find_links).is_dir():
        raise UsageError(f"--find-links {args.find_links}: not a directory")
    if args.findings != findings.DEFAULT and not args.findings.is_dir() and \
            not args.no_findings:
        raise UsageError(f"--findings {args.findings}: not a directory")
    if args.results.is_dir():
        raise UsageError(f"--results {args.results}: is a directory; expected a file")
    return Options(tuple(chosen), tuple(args.impl), args.cases, args.seed, args.timeout,
                   args.jobs, args.results, args.json, args.picture, args.find_links,
                   args.rerun, None if args.no_findings else args.findings)


def run(args) -> int:
    from kvfuzz.fuzz.history.run import history
    from kvfuzz.impl.upstream_cache import FetchError

    try:
        return history(options(args))
    except (HistoryError, results.ResultsError) as error:
        raise UsageError(str(error)) from None
    except FetchError as error:  # the lock's other packages, which every release imports
        print(f"kvfuzz: error: {error}", file=sys.stderr)
        return 1
