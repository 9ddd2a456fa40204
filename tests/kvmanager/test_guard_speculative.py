"""The guard under vLLM's own scheduler configured for speculative decoding (EAGLE's lookahead
hashes, EAGLE groups flagged apart, multi-module MTP) and for prompts given as embeddings
(`fuzz/kvmanager/vllm_speculative.py`): each setting read into the trace's header (or a
request's `arrive`), guarded sessions clean and their recordings replayed, and a mutant of the
released source for each caught under the guard. Slow: each imports vLLM."""

import pytest

import kvfuzz
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Settle, Trace, to_json
from tests.helpers import with_engine

with_vllm = with_engine("vllm")  # (the codec test needs no vLLM)

# workload name -> the header fields its manager must be read as
SETTINGS = {
    "LOOKAHEAD_HASHES": dict(lookahead=2, hash_lookahead=1, eagle=False, prefill_lookahead=0),
    "EAGLE_GROUPS": dict(lookahead=1, hash_lookahead=0, eagle=True, eagle_groups=(1,)),
    "MTP": dict(lookahead=3, hash_lookahead=3, eagle=False, prefill_lookahead=3),
    "PROMPT_EMBEDS": dict(lookahead=0, hash_lookahead=0, eagle=False),
}
# the setting's mutant of the released source, and the session that catches it (lookahead
# hashing's: in MTP's hashes of 3 tokens; with EAGLE's one token the mutant's hasher raises
# IndexError in the engine itself, below)
MUTANTS = {"lookahead_hash_early": "MTP", "eagle_drop_every_group": "EAGLE_GROUPS",
           "mtp_reprefillable_cached": "MTP", "embeds_key_dropped": "PROMPT_EMBEDS"}


def session(seed, name, corpus_dir, workload, check=True):
    from tests.kvmanager.test_guard import scheduler_session

    return scheduler_session(seed, name, corpus_dir, check=check, workload=workload)


@with_vllm
@pytest.mark.parametrize("workload", SETTINGS)
def test_a_speculative_or_embedded_session_runs_guarded_clean_and_its_record_replays(
        workload, tmp_path):
    for seed in range(2):
        run = session(seed, None, tmp_path, workload)
        guarded = run.manager.kvfuzz_session
        assert guarded.divergence is None and run.finished == run.requests, run
        header = guarded.trace()
        assert {name: getattr(header, name) for name in SETTINGS[workload]} == \
            SETTINGS[workload]
        arrivals = [op for op in guarded.ops if isinstance(op, Arrive)]
        if workload == "PROMPT_EMBEDS":
            assert 0 < sum(op.embeds for op in arrivals) < len(arrivals)
        else:  # the scheduler caches after each output with draft tokens
            assert any(isinstance(op, Settle) for op in guarded.ops)
        recorded = session(seed, None, tmp_path, workload, check=False).manager.kvfuzz_session
        assert recorded.trace() == guarded.trace()
        assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


@with_vllm
@pytest.mark.parametrize("name", MUTANTS)
def test_the_settings_mutant_raises_under_the_guard_with_a_file_that_replays(name, tmp_path):
    """Caught in one of three sessions; its file fails the same check on the mutant (the
    prompt-embeds mutant's wrong hash is seen at the `arrive` under the guard, which compares
    each new request's hashes, and at its `schedule` in a replay) and is clean on the released
    class."""
    for seed in range(3):
        try:
            session(seed, name, tmp_path, MUTANTS[name])
        except kvfuzz.Mismatch as raised:
            found = raised.divergence
            break
    else:
        raise AssertionError(f"{name}: no divergence in 3 sessions")
    assert found.impl == f"mutant.vllm.kvmanager.{name}"
    replayed = kvfuzz.replay(found.saved_path, found.impl).divergences
    assert [d.signature[-1] for d in replayed] == [found.signature[-1]]
    assert kvfuzz.replay(found.saved_path, "vllm.kvmanager").ok


@with_vllm
def test_early_lookahead_hashes_of_one_token_crash_the_engines_own_hasher(tmp_path):
    """With EAGLE's one lookahead token the mutant's hasher indexes the token after a block
    that ends the request: the engine fails building its request, before any manager call."""
    with pytest.raises(IndexError):
        session(0, "lookahead_hash_early", tmp_path, "LOOKAHEAD_HASHES")


@with_vllm
def test_a_guard_that_passes_the_post_output_caching_through_is_caught(monkeypatch, tmp_path):
    """The `settle` op is load-bearing: a guard that lets the scheduler's cache_blocks after an
    output through unrecorded leaves the oracle a block behind the live pool."""
    from kvfuzz.fuzz.kvmanager.guard import GuardedManager

    monkeypatch.setattr(GuardedManager, "_settle", lambda self, tracked, request, n:
                        self._kvfuzz_object.cache_blocks(request, n))
    with pytest.raises(kvfuzz.Mismatch):
        for seed in range(3):
            session(seed, None, tmp_path, "LOOKAHEAD_HASHES")


@with_vllm
def test_a_guard_that_reads_embeddings_as_token_ids_is_caught(monkeypatch, tmp_path):
    """The embeddings mapping is load-bearing: with each embedded prompt arriving as token ids
    (its embedding values, `embeds` left false), the oracle shares blocks of an embedded prompt
    and a prompt of token ids that the live manager keeps apart."""
    from dataclasses import replace

    from kvfuzz.fuzz.kvmanager import guard_tracked

    monkeypatch.setattr(guard_tracked, "Arrive", lambda *args, **kwargs: replace(
        Arrive(*args, **kwargs), embeds=False))
    with pytest.raises(kvfuzz.Mismatch):
        session(0, None, tmp_path, "PROMPT_EMBEDS")


def test_a_settle_op_round_trips_and_a_bad_one_names_its_field():
    trace = Trace(8, 2, 0, 64, (Arrive(1, (1, 2, 3)), Schedule(1, 3), Settle(1)))
    assert codec.from_json(to_json(trace)) == trace
    data = to_json(trace)
    data["ops"][2]["rid"] = "one"
    with pytest.raises(FormatError, match=r"ops\[2\]\.rid"):
        codec.from_json(data)


# the mutant each workload's committed recording kills (EAGLE's one token of lookahead hashing
# too: replayed by kvfuzz's driver, the mutant's hasher raises there, a crash divergence)
KILLS = {"LOOKAHEAD_HASHES": "lookahead_hash_early", "EAGLE_GROUPS": "eagle_drop_every_group",
         "MTP": "mtp_reprefillable_cached", "PROMPT_EMBEDS": "embeds_key_dropped"}


@with_vllm
@pytest.mark.parametrize("workload", KILLS)
def test_the_corpus_holds_each_workloads_recording_which_kills_its_mutant(workload):
    """corpus/ keeps session 1 of each workload recorded (regenerated by `recording`, vLLM's
    scheduler being deterministic for a seed): clean on the release, its setting's mutant
    killed."""
    from pathlib import Path

    from kvfuzz.fuzz.engine import corpus
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import recording
    from kvfuzz.fuzz.targets import TARGETS
    from tests.conftest import CORPUS

    trace = recording(1, "kvmanager", workload=workload)
    path = Path(CORPUS) / TARGETS["kvmanager"].file_name(trace)
    assert path.exists(), f"regenerate it: kvfuzz.fuzz.engine.corpus.save(TARGETS['kvmanager']" \
                          f", recording(1, 'kvmanager', workload={workload!r}), 'corpus')"
    assert corpus.load(path)[1] == trace
    assert kvfuzz.replay(path, "vllm.kvmanager").ok
    assert not kvfuzz.replay(path, f"mutant.vllm.kvmanager.{KILLS[workload]}").ok
