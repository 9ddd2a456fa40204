"""Campaign bookkeeping without libFuzzer: found cases are shrunk and saved once per signature,
bugs the corpus already holds are known from the start, and corpus merge/minimize."""

from __future__ import annotations

import io
import json

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.cli.args import duration
from kvfuzz.fuzz.campaign.supervisor import Campaign
from kvfuzz.fuzz.cli.corpus_tools import input_features, merge, minimize
from kvfuzz.fuzz.campaign.specs import SPECS
from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.fuzz.targets import EXTEND

MUTANT = "mutant.owner_left_bisect"


def _diverging(count: int, signature=None):
    impl = EXTEND.catalogue.resolve(MUTANT)
    found = []
    for index in range(3000):
        outcome = EXTEND.check(EXTEND.generator.generate(2, index), impl)
        if outcome.status == DIVERGE and signature in (None, outcome.divergence.signature):
            signature = outcome.divergence.signature
            found.append(outcome.divergence.input)
            if len(found) == count:
                return found
    raise AssertionError("not enough diverging cases")


def _campaign(tmp_path) -> Campaign:
    campaign = Campaign(SPECS["extend"], [MUTANT], 1, 1, tmp_path / "corpus",
                        tmp_path / "work", out=io.StringIO())
    for directory in campaign.dirs.values():
        directory.mkdir(parents=True)
    return campaign


def test_many_failures_of_one_signature_become_one_small_corpus_file(tmp_path):
    campaign = _campaign(tmp_path)
    for case in _diverging(5):
        corpus.save(EXTEND, case, campaign.dirs["found"])
    campaign._triage_new()
    saved = list((tmp_path / "corpus").iterdir())
    assert len(saved) == 1 == len(campaign.findings)
    assert corpus.load(saved[0])[1].batch_size <= 3
    signature = next(iter(campaign.findings))
    assert signature in campaign.known_path.read_text().splitlines()


def test_a_bug_already_in_the_corpus_is_known_before_fuzzing(tmp_path):
    campaign = _campaign(tmp_path)
    corpus.save(EXTEND, _diverging(1)[0], tmp_path / "corpus")
    campaign._known_from_corpus()
    assert len(campaign.preexisting) == 1
    assert json.loads(campaign.known_path.read_text().splitlines()[0])[1] == MUTANT


def test_merge_deduplicates_by_content(tmp_path):
    cases = [EXTEND.generator.generate(0, i) for i in range(6)]
    for name, chosen in (("a", cases[:4]), ("b", cases[2:])):
        for case in chosen:
            corpus.save(EXTEND, case, tmp_path / name)
    merge([tmp_path / "a", tmp_path / "b"], tmp_path / "into", io.StringIO())
    assert len(list((tmp_path / "into").iterdir())) == 6


def test_minimize_keeps_every_feature_with_fewer_files(tmp_path):
    for index in range(40):
        corpus.save(EXTEND, EXTEND.generator.generate(1, index), tmp_path)
    corpus.save(EXTEND, _diverging(1)[0], tmp_path)
    impls = [EXTEND.catalogue.resolve(name) for name in ("torch.vectorized", MUTANT)]

    def features():
        return set().union(*(input_features(*corpus.load(p), impls) for p in tmp_path.iterdir()))

    before = features()
    minimize(tmp_path, ["torch.vectorized", MUTANT], dry_run=False, out=io.StringIO())
    assert len(list(tmp_path.iterdir())) < 41
    assert features() == before
    assert any(feature.startswith("diverges") for feature in before)


def test_durations_read_like_people_write_them():
    assert [duration(t) for t in ("90", "90s", "10m", "1h", "1h30m")] == \
        [90, 90, 600, 3600, 5400]


def test_minimize_tolerates_files_that_vanish_while_it_runs(tmp_path, monkeypatch):
    """A `diff` writing to the same folder replaces its first finds by their shrunk inputs:
    minimize once died with a FileNotFoundError traceback on a file listed, then gone."""
    for index in range(12):
        corpus.save(EXTEND, EXTEND.generator.generate(1, index), tmp_path)
    listed = corpus.input_files([tmp_path])
    gone_before_read, gone_before_removal = listed[0], listed[1:6]
    gone_before_read.unlink()
    real_features = input_features

    def features_then_delete(*args, **kwargs):  # files vanish after being read, too
        for path in gone_before_removal:
            path.unlink(missing_ok=True)
        return real_features(*args, **kwargs)

    monkeypatch.setattr(corpus, "input_files", lambda paths: listed)
    monkeypatch.setattr("kvfuzz.fuzz.cli.corpus_tools.input_features", features_then_delete)
    out = io.StringIO()
    assert minimize(tmp_path, ["torch.vectorized"], dry_run=False, out=out) == 0
    assert "of 11 file(s)" in out.getvalue()


def test_a_short_runs_count_is_written_at_each_power_of_two(tmp_path, monkeypatch):
    """libFuzzer ends a worker with C's exit (no Python runs after it), so the count on disk is
    the last one written: within 2 s, and for a run shorter than that within half."""
    from kvfuzz.fuzz.campaign.harness import Harness

    monkeypatch.setenv("KVFUZZ_STATS", str(tmp_path))
    harness = Harness("extend")
    written = []
    for _ in range(9):
        harness.done_one()
        written.append(json.loads(harness.stats_path.read_text())["execs"])
    assert written == [1, 2, 2, 4, 4, 4, 4, 8, 8]
