"""`kvfuzz diff compaction` and `kvfuzz replay` of compaction traces, as a user meets them: exit
statuses, the shrunk trace saved where --corpus says, and a replay that reproduces the report."""

from __future__ import annotations

import contextlib
import io

import pytest

from kvfuzz.fuzz.cli import main
from kvfuzz.fuzz.compaction_target import Tally

MUTANT = "mutant.compaction.p2v_not_cleared"


def run(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    """The mutant's divergence, found once: (exit status, stderr, saved files)."""
    corpus = tmp_path_factory.mktemp("found")
    status, _, err = run("diff", "compaction", "--impl", MUTANT, "--cases", "5",
                         "--corpus", str(corpus))
    return status, err, sorted(corpus.iterdir())


def test_diff_passes_on_the_bundled_implementations(tmp_path):
    status, _, err = run("diff", "compaction", "--cases", "3", "--corpus", str(tmp_path))
    assert status == 0, err
    assert "summary: compaction" in err and "compaction.lazy" in err and "compaction.eager" in err
    assert not list(tmp_path.iterdir())


def test_mutant_exits_1_and_saves_the_shrunk_trace(found):
    status, err, saved = found
    assert status == 1, err
    assert len(saved) == 1 and saved[0].name.startswith("compaction-"), saved
    assert "compaction divergence: implementation " + MUTANT in err and "shrunk from" in err
    assert f"kvfuzz replay {saved[0]} --impl {MUTANT}" in err


def test_replay_reproduces_the_saved_divergence(found):
    _, err, saved = found
    status, out, _ = run("replay", str(saved[0]), "--impl", MUTANT)
    assert status == 1
    problems = [line for line in err.splitlines() if line.startswith("    up:")]
    assert problems and all(line in out for line in problems), (problems, out)
    status, out, _ = run("replay", str(saved[0]))  # lazy and eager agree with the oracle
    assert status == 0 and out.count("ok ") == 2, out


def test_unknown_implementation_is_a_one_line_usage_error():
    status, _, err = run("diff", "compaction", "--impl", "compaction.nope")
    assert status == 2
    assert err.strip().count("\n") == 0 and "known: compaction.lazy" in err, err


def test_racing_chunks_keep_the_lowest_divergence():
    # Chunks finish in any order; the report must be the first failing index, whoever found it.
    total, later, earlier = Tally(), Tally(cases=3, divergence="late", at=30), \
        Tally(cases=2, divergence="early", at=12)
    total.merge(later)
    total.merge(earlier)
    total.merge(Tally(cases=1, divergence="latest", at=40))
    assert (total.divergence, total.at, total.cases) == ("early", 12, 6)
