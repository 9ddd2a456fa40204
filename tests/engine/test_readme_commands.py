"""The README's two set-up commands stay true: command 1's `kvfuzz` arguments are a command the
installed `kvfuzz` takes, for every target with the released classes; command 2 is the test
command `.ci/run` runs. CI no longer runs command 1's job itself (since 2026-12-07: 101 s of
CI's 1,720, every target's workers started for one input each); what it runs is in the suite,
target by target: `test_cli.py`'s diff of each target's defaults (the released classes among
them once fetched), `test_upstream_cache.py`'s `--upstream`, `test_missing_package.py`'s diff of
every target, `tests/<target>/test_upstream.py`'s seeded traces on the released classes."""

from __future__ import annotations

import re
import shlex

import pytest

from kvfuzz.fuzz.cli.main import check_usage, parse
from tests.conftest import ROOT


def setup_commands() -> list[str]:
    """The command lines (comments and blank lines left out) of the README's fenced block under
    "## Set-up: two commands"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set-up: two commands", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_gives_two_commands():
    assert len(setup_commands()) == 2, setup_commands()


def check_command_1(line: str) -> None:
    """Command 1 installs kvfuzz, then runs `kvfuzz diff` of every target with the released
    classes; raises (AssertionError, or argparse's SystemExit) where it does not."""
    *install, run = line.split("&&")
    assert install and "pip install -e '.[test,fuzz,bench]'" in install[-1], install
    words = shlex.split(run)
    assert words[0] == ".venv/bin/kvfuzz", words
    args = parse(words[1:])
    check_usage(args)  # raises (a usage error) where the flags no longer go together
    assert (args.command, args.target, args.upstream, args.impl) == ("diff", "all", True, []), args


def test_command_1_runs_kvfuzz_diff_of_every_target_with_the_released_classes():
    check_command_1(setup_commands()[0])


@pytest.mark.parametrize("edit", [("--upstream", "--upstreams"),  # a flag kvfuzz lacks
                                  ("diff --upstream", "diff extend --upstream"),  # one target
                                  ("diff --upstream", "diff")])  # kvfuzz's own classes only
def test_a_changed_command_1_is_caught(edit):
    with pytest.raises((AssertionError, SystemExit)):
        check_command_1(setup_commands()[0].replace(*edit))


def test_command_2_is_the_test_command_ci_runs():
    readme = shlex.split(setup_commands()[1])
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if "pytest" in line and not line.lstrip().startswith("#")]
    assert len(ci) == 1, ci
    ci_words = shlex.split(ci[0])
    # the same environment and arguments; CI's `python` is the venv's (activated)
    assert readme[0] == ci_words[0] == "HYPOTHESIS_PROFILE=ci"
    assert readme[1] == ".venv/bin/python" and ci_words[1] == "python"
    assert readme[2:] == ci_words[2:] == ["-m", "pytest", "-n", "auto"]

