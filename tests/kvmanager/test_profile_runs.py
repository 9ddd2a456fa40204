"""`kvfuzz diff kvmanager --profile NAME` end to end, in worker processes: the workers draw the
profile's own stream (a mutant's first divergence is on a trace of that profile, its replay
line names the profile and regenerates it), and the released class runs the profile alone
clean. Skips without vLLM (`slow`)."""

from __future__ import annotations

import shlex

from kvfuzz.fuzz.cli.main import parse
from kvfuzz.fuzz.engine.run import RunOptions, SeededRun
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from tests.helpers import needs_engine

pytestmark = needs_engine("vllm")


def test_a_profile_alone_runs_in_workers_and_its_replay_line_names_it():
    mutant = KVMANAGER.catalogue.resolve("mutant.vllm.kvmanager.last_token_hit")
    release = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    run = SeededRun(KVMANAGER, [mutant, release],
                    RunOptions(cases=4, jobs=2, profile="chunked local"), out=None)
    run.run()
    clean = run.tallies[release.name]
    assert (clean.cases, clean.agree) == (4, 4)
    assert clean.features["config: chunked local attention"] == 4, clean.features
    found = run.tallies[mutant.name].divergence
    assert found is not None and found.input.note == "profile chunked local", found
    line = KVMANAGER.regenerate_command(found.input, mutant.name)
    assert "--profile 'chunked local' --seed 0 --start " in line, line
    args = parse(shlex.split(line)[1:])
    assert KVMANAGER.alone(args.profile).generator.generate(args.seed, args.start) == found.input
