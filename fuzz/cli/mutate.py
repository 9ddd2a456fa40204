"""`kvfuzz mutate TARGET --impl NAME|module:attr`: first-order mutants of the implementation's
own source (Cosmic Ray's operators, and kvfuzz's statement removal and slice bounds), each put in
place in a process of its own and run through the target's seeded check; the score is the share
of reached, non-equivalent mutants that kvfuzz kills.

    kvfuzz mutate mamba --impl sglang.mamba
    kvfuzz mutate allocator --impl sglang.paged --sample 150 --jobs 2 --json report.json
    kvfuzz mutate kvmanager --impl vllm.kvmanager --scope vllm.v1.core.single_type_kv_cache_manager
    kvfuzz mutate kvmanager --impl vllm.kvmanager --profile "async drafts" --sample 40
"""

from __future__ import annotations

import argparse

from kvfuzz.fuzz.cli.args import duration, jobs, positive, seconds, size
from kvfuzz.fuzz.cli.profiles import check_profile, known_profiles
from kvfuzz.fuzz.engine.impl_process import DEFAULT_MEMORY
from kvfuzz.fuzz.targets import TARGETS

# The mutants are judged on this profile's own stream, as `kvfuzz diff --profile` runs it (a
# profile made alone only, `streams.ALONE_ONLY`, is drawn by no mix at all).
PROFILE_HELP = (
    "judge the mutants on the inputs of this generator profile alone (its own seeded stream, "
    "as kvfuzz diff --profile NAME draws them: case I of seed S is that stream's input I), "
    "where by default they run on the target's mix; a survivor's rerun line carries it, and "
    "each profile keeps a results file of its own; " + known_profiles())

EPILOG = """statuses: killed (a divergence), timeout and crashed (kills too, as kvfuzz diff reports
them), survived, not reached (no seeded case runs its lines: not run), equivalent (compiles to
the original's code: not run), cosmetic (inside a logging, warning or print call:
not run), incompetent (cannot be put in place), error (kvfuzz's judge
raised), not run (--time, or interrupted: rerun the command to resume). A survivor whose
lines never ran in its child (a set-up the worker did before the fork) is rerun in a fresh
process, and that verdict counts ("rerun fresh" in the report).
exit status: 0 done, 1 score under --fail-under, 2 bad usage or an implementation that already
diverges unmutated, 130 interrupted (the results file keeps every mutant done)"""


def add_parser(commands) -> None:
    mutate = commands.add_parser(
        "mutate", help="mutation score of kvfuzz on an implementation's own source",
        description=__doc__.split("\n\n")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    mutate.add_argument("target", choices=list(TARGETS), help="the target whose check runs")
    mutate.add_argument("--impl", required=True, metavar="NAME|module:attr",
                        help="the implementation (a registered name or an import path)")
    mutate.add_argument("--scope", action="append", default=[], metavar="module[:Qualname]",
                        help="what to mutate (repeatable): a module, or a class or function in "
                             "it; default: what --impl names")
    mutate.add_argument("--operator", action="append", default=[], metavar="GLOB",
                        help="only operators matching (repeatable), e.g. 'ReplaceComparison*', "
                             "RemoveStatement")
    mutate.add_argument("--cases", type=positive, default=None,
                        help="seeded cases per mutant (default: the target's, at most 200)")
    mutate.add_argument("--seed", type=int, default=0,
                        help="seed of the case generator and of --sample")
    mutate.add_argument("--start", type=int, default=0, help="first case index")
    mutate.add_argument("--profile", default=None, metavar="NAME", help=PROFILE_HELP)
    mutate.add_argument("--sample", type=positive, default=None, metavar="N",
                        help="N mutants drawn with --seed (default: every one)")
    mutate.add_argument("--time", type=duration, default=None,
                        help="stop handing out mutants after this long (e.g. 10m); resumable")
    mutate.add_argument("--jobs", type=jobs, default=1, help="worker processes")
    mutate.add_argument("--results", default=None, metavar="FILE",
                        help="results file, resumed when rerun (default: .kvfuzz/mutate/"
                             "TARGET-HASH.jsonl, one per set of options)")
    mutate.add_argument("--only", default=None, metavar="ID",
                        help="run this one mutant (ids are in the report and the results file)")
    mutate.add_argument("--json", default=None, metavar="FILE",
                        help="the report as JSON to FILE ('-': stdout)")
    mutate.add_argument("--fail-under", type=float, default=None, metavar="PERCENT",
                        help="exit 1 when the score is under PERCENT")
    mutate.add_argument("--timeout", type=seconds, default=None, metavar="SECONDS",
                        help="per mutant (default: 3x the unmutated run + 5 s, at least 10 s)")
    mutate.add_argument("--also-run", default=None, metavar="COMMAND",
                        help="your own test command (a shell line, e.g. \"pytest tests/x.py\"), "
                             "run on the same mutants with the mutated module in place: the "
                             "report adds the kill matrix (kvfuzz, the tests, both, neither)")
    mutate.add_argument("--also-timeout", type=seconds, default=None, metavar="SECONDS",
                        help="per --also-run of one mutant (default: 3x the unmutated run + "
                             "10 s, at least 30 s)")
    mutate.add_argument("--equivalents", default=None, metavar="FILE",
                        help="JSON {\"mutants\": {id: reason}}: survivors listed there are "
                             "reported equivalent, with the reason (kvfuzz's own list of "
                             "upstream ones is always read: impl/equivalent_mutants.json)")
    mutate.add_argument("--memory", type=size, default=DEFAULT_MEMORY, metavar="SIZE",
                        help="memory each mutant's process may take on top of what it starts "
                             "with")


def run(args) -> int:
    from kvfuzz.fuzz.engine.mutation.run import Options, mutate

    check_profile(args.target, args.profile)  # a bad name: one line, before any worker starts
    cases = args.cases or min(TARGETS[args.target].settings.default_cases, 200)
    return mutate(Options(args.target, args.impl, tuple(args.scope),
                          tuple(args.operator) or ("*",), cases, args.seed, args.start,
                          args.sample, args.time, args.jobs, args.results, args.only, args.json,
                          args.fail_under, args.timeout, args.memory, args.also_run,
                          args.also_timeout, args.equivalents, profile=args.profile))
