"""vLLM's spec-decode padded admission beyond the plain one (`fuzz/kvmanager/padding.py`): a
synchronous KV load that leaves one token (`Connect.pad`), the resumption after a load that left
one (a whole prompt loaded: its last token), and asynchronous scheduling. The op's field; the
oracle's side on worked examples (the rows get slots, none is cached); with vLLM, the profiles'
first traces reach each case, and (slow) the scheduler session with the fake connector and
EAGLE runs guarded clean with padded connects and a padded resumption, and a guard that reads
them as the token alone is caught. The release's mutants that clamp the rows
(`spec_pad_external_clamped`, `spec_pad_resumed_clamped`) are caught in `test_mutants.py` and by
the corpus."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded
from kvfuzz.strategies.kvmanager.hashing import chain
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Trace, to_json
from tests.helpers import with_engine

with_vllm = with_engine("vllm")  # (the module's first tests need no vLLM)
# the corpus's killer of `spec_pad_external_clamped` (shrunk): 19 tokens, 18 loaded
# synchronously, the last admitted with 3 placeholder rows (a block of 4 past the prompt's)
EXTERNAL = Trace(8, 4, 0, 1024, (Arrive(4, tuple(range(3, 22))),
                                 Connect(4, 10000, 10000, pad=3)), full_sequence_must_fit=True,
                 watermark=0.2, events=True, stats=True, lookahead=3)
RESUMED = Trace(6, 4, 0, 1024, (Arrive(17, tuple(range(3, 15))), Connect(17, 10000, 12, True,
                                                                         pad=3),
                                Loaded(17, 12), Schedule(17, 10000, 3)), lookahead=3)


def test_the_connect_field_round_trips_is_left_out_at_zero_and_bad_values_are_one_line_errors():
    assert codec.from_json(to_json(EXTERNAL)) == EXTERNAL
    plain = replace(EXTERNAL, ops=(EXTERNAL.ops[0], replace(EXTERNAL.ops[1], pad=0)))
    assert "pad" not in to_json(plain)["ops"][1]  # a file from before it reads as before
    for bad in (-1, codec.MAX_PAD + 1, "2"):
        data = to_json(EXTERNAL)
        data["ops"][1]["pad"] = bad
        with pytest.raises(FormatError) as error:
            codec.from_json(data)
        assert "\n" not in str(error.value) and "ops[1].pad" in str(error.value)


def test_the_oracle_gives_a_padded_external_admission_its_rows_and_caches_its_tokens_alone():
    """r1's 6 tokens: 5 loaded synchronously, the last admitted with 3 placeholder rows: slots
    to position 8 (blocks 1 and 2 of 4), one block cached (tokens 1-4), none for the rows."""
    model = KVManagerModel(8, 4, 0, 64)
    tokens = [1, 2, 3, 4, 5, 6]
    fresh = model.allocate_slots(1, chain(tokens, 4), 6, 0, 1 + 3, 0, [[]], tokens=tokens,
                                 external=5)
    assert model.tables[0][1] == [1, 2, 3] and fresh == [[3]]
    assert model.num_cached[0][1] == 1  # block 2 holds 2 real tokens; block 3 placeholders


def test_the_oracle_gives_a_padded_resumption_its_rows_and_no_more_cached():
    """r1's 8 tokens loaded (2 blocks, cached when the load is reported), its last token
    recomputed with 2 placeholder rows: slots to position 10, a third block, nothing cached
    past the request's tokens."""
    model = KVManagerModel(8, 4, 0, 64)
    tokens = list(range(1, 9))
    hashes = chain(tokens, 4)
    model.allocate_slots(1, hashes, 8, 0, 0, 0, [[]], tokens=tokens, external=8, delay=True)
    model.cache_blocks(1, hashes, 8, tokens)
    fresh = model.allocate_slots(1, hashes, 8, 7, 1 + 2, 0, None, tokens=tokens, waiting=True)
    assert fresh == [[3]] and model.tables[0][1] == [1, 2, 3]
    assert model.num_cached[0][1] == 2


@with_vllm
def test_the_profiles_first_traces_pad_under_a_connector_after_a_load_and_asynchronously():
    """The "connector" profile's first 3 traces of seed 0 pad synchronous loads' admissions and
    resumptions after a load; the "lookahead hashes" profile's first 3, an admission under
    asynchronous scheduling: each agreeing with the release to its last op."""
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER
    from kvfuzz.strategies.kvmanager import connector, lookahead_hashes
    from tests.helpers import agreeing_features

    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    for generator, wanted in ((connector.GENERATOR, ("admission padded under a connector",
                                                     "admission padded after its load")),
                              (lookahead_hashes.GENERATOR,
                               ("admission padded under asynchronous scheduling",))):
        events = agreeing_features("kvmanager", vllm, (generator.generate(0, index)
                                                       for index in range(3)))
        assert all(events[name] for name in wanted), {name: events[name] for name in wanted}
    for trace in (EXTERNAL, RESUMED):  # the worked traces: clean on the release
        assert agreeing_features("kvmanager", vllm, [trace])["admission padded with "
                                                             "placeholder drafts"] == 1


def _padded(ops) -> tuple[int, int]:
    """(padded connects, padded resumptions after an asynchronous load) among `ops`."""
    loading, resumed = set(), 0
    for op in ops:
        if isinstance(op, Connect) and op.load:
            loading.add(op.rid)
        resumed += isinstance(op, Schedule) and op.pad > 0 and op.rid in loading
    return sum(isinstance(op, Connect) and op.pad > 0 for op in ops), resumed


@with_vllm
@pytest.mark.slow
def test_the_session_with_a_connector_and_eagle_runs_guarded_clean_and_replays(tmp_path):
    """Session 5 of `SPEC_CONNECTOR` (the fake connector, EAGLE's 2 draft tokens): padded
    synchronous loads and a padded resumption after a whole prompt loaded, each mapped (the
    guard refused them before); every request finished; its recording the same trace, clean
    on the release."""
    import kvfuzz
    from tests.kvmanager.test_guard import scheduler_session

    run = scheduler_session(5, None, tmp_path, workload="SPEC_CONNECTOR")
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests, run
    connects, resumed = _padded(guarded.ops)
    assert connects and resumed, (connects, resumed)
    recorded = scheduler_session(5, None, tmp_path, check=False,
                                 workload="SPEC_CONNECTOR").manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


@with_vllm
@pytest.mark.slow
@pytest.mark.parametrize("dropped", ["connect", "resumption"])
def test_a_guard_that_maps_a_padded_call_to_the_token_alone_is_caught(monkeypatch, tmp_path,
                                                                     dropped):
    """The mappings are load-bearing: a padded connect (or resumption) read without its `pad`
    is a lock step that allocates 1 token where the engine asked 3: a `Mismatch`."""
    import kvfuzz
    from kvfuzz.fuzz.kvmanager import guard_connector
    from tests.kvmanager.test_guard import scheduler_session

    if dropped == "connect":
        monkeypatch.setattr(guard_connector, "Connect",
                            lambda *args: Connect(*args[:6]))
    else:
        monkeypatch.setattr(guard_connector, "Schedule", lambda rid, chunk, pad=0, **_:
                            Schedule(rid, chunk))
    with pytest.raises(kvfuzz.Mismatch):
        scheduler_session(5, None, tmp_path, workload="SPEC_CONNECTOR")


@with_vllm
@pytest.mark.slow
@pytest.mark.parametrize("name, seed", [("spec_pad_external_clamped", 24),
                                        ("spec_pad_resumed_clamped", 12)])
def test_a_padding_mutant_raises_in_the_connector_session_with_a_file_that_replays(name, seed,
                                                                                   tmp_path):
    """The release's scheduler makes the calls the mutants get wrong: under the guard,
    `SPEC_CONNECTOR` session 24 (a padded synchronous load whose rows pass a block's end) and
    12 (a padded resumption) raise `Mismatch` on each, with a file that fails the same way on
    the mutant and replays clean on the release."""
    from tests import guarding
    from tests.kvmanager.test_guard import scheduler_session

    guarding.assert_mutant_raises_in_sessions(
        lambda offset: scheduler_session(seed + offset, name, tmp_path,
                                         workload="SPEC_CONNECTOR"),
        f"mutant.vllm.kvmanager.{name}", "vllm.kvmanager", seeds=1)
