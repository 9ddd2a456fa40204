"""`kvfuzz mutate --profile NAME`: the mutants judged on one generator profile's stream alone,
as `kvfuzz diff --profile` draws it. In this process: the option parsed and checked (a bad name
is one line, exit 2), the survivor's rerun line and the case's `kvfuzz diff` line carry it, the
results file is keyed by it, the cases are the profile's stream's. Slow tier, one command: the
released HiSparse coordinator's line 815 removed, which no case of the mix's first 800 kills, is
killed by case 8 of the "hisparse import" stream, on which the release agrees."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.cli.main import main, parse
from kvfuzz.fuzz.engine.mutation.results import default_path
from kvfuzz.fuzz.engine.mutation.run import Options, _command, _diff_command, run_identity
from kvfuzz.fuzz.targets import TARGETS
from tests.forked import kvfuzz_forked
from tests.helpers import with_engine

IMPORT = "hisparse import"
# `self._record_copy(request_id, page_idx, pending.host_block)` removed: a restored page leaves
# no GPU copy for a later hit to adopt (docs/upstream-vllm.md, the "hisparse lag" survivors)
LINE_815 = "vllm.v1.hisparse.coordinator:815:24:RemoveStatement:289"
SCOPE = "vllm.v1.hisparse.coordinator:HiSparseCoordinator._complete_host_writes"


def test_the_option_is_parsed_and_defaults_to_the_mix():
    args = parse(["mutate", "kvmanager", "--impl", "vllm.kvmanager", "--profile", IMPORT])
    assert args.profile == IMPORT
    assert parse(["mutate", "kvmanager", "--impl", "vllm.kvmanager"]).profile is None


def test_the_help_explains_it_and_names_every_profile(capsys):
    with pytest.raises(SystemExit):
        parse(["mutate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--profile NAME" in text and "judge the mutants on the inputs of this" in text
    assert all(repr(profile) in text for profile in TARGETS["kvmanager"].profiles())
    assert "'async connector'" in text and "'async drafts'" in text  # alone-only, listed too


@pytest.mark.parametrize("target, expected", [
    ("kvmanager", "--profile: kvmanager has no generator profile 'nope'; its profiles: "),
    ("mamba", "--profile: mamba has no generator profile 'nope'"),  # a target without any
])
def test_a_bad_profile_is_one_line_before_anything_runs(capsys, target, expected):
    status = main(["mutate", target, "--impl", "nothing.here:X", "--profile", "nope"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"kvfuzz: error: {expected}"), err
    if target == "kvmanager":  # the known ones named, the alone-only ones among them
        assert "hisparse import, " in err
        assert "async connector" in err and "async drafts" in err


def test_the_rerun_lines_carry_the_profile():
    options = Options("kvmanager", "vllm.kvmanager", scopes=(SCOPE,), cases=1, start=8,
                      profile=IMPORT)
    command = _command(options)
    assert "--profile 'hisparse import' --start 8" in command, command
    assert command.endswith(" --only {id}")
    assert "--profile" not in _command(Options("kvmanager", "vllm.kvmanager", cases=1))
    assert _diff_command(options, 8) == ("kvfuzz diff kvmanager --profile 'hisparse import' "
                                         "--seed 0 --start 8 --cases 1")
    assert "--profile" not in _diff_command(Options("kvmanager", "vllm.kvmanager"), 8)


def test_each_profile_keeps_results_of_its_own():
    plan = SimpleNamespace(scopes=[SCOPE], digest="d", stream="s")  # the same stream name
    mix = run_identity(Options("kvmanager", "vllm.kvmanager"), plan)
    assert "profile" not in mix  # the mix's files, written before the option, still resume
    paths = {default_path("kvmanager", run_identity(
        Options("kvmanager", "vllm.kvmanager", profile=profile), plan))
        for profile in (None, IMPORT, "async drafts")}
    assert len(paths) == 3


def test_the_cases_are_the_profile_streams():
    # what the worker runs (worker.plan: `TARGETS[target].alone(profile)`): case 8 of seed 0
    # is the "hisparse import" stream's own, not the mix's case 8 (a `kvmanager/5` trace)
    alone = TARGETS["kvmanager"].alone(IMPORT).generator.generate(0, 8)
    mixed = TARGETS["kvmanager"].generator.generate(0, 8)
    assert alone.origin.generator == "kvmanager/5[hisparse import]", alone.origin
    assert mixed.origin.generator != alone.origin.generator


@with_engine("vllm")
def test_a_mutant_only_the_profile_reaches_is_killed(tmp_path):
    ran = kvfuzz_forked("mutate", "kvmanager", "--impl", "vllm.kvmanager", "--scope", SCOPE,
                        "--profile", IMPORT, "--start", "8", "--cases", "1", "--only",
                        LINE_815, "--json", "r.json", cwd=tmp_path, timeout=300)
    # status 0: the release agrees on the case (a divergence unmutated is exit 2)
    assert ran.returncode == 0, ran.stderr
    (record,) = json.loads((tmp_path / "r.json").read_text())["records"]
    assert record["status"] == "killed" and record["case"] == 8, record
    assert "adoption" in record["what"], record
    assert "kvfuzz diff kvmanager --profile 'hisparse import' --seed 0 --start 8" in ran.stdout
