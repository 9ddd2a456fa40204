"""Requests with extra hash keys (`kvmanager/5[extra keys]`, `strategies/kvmanager/extra_keys.py`):
a LoRA adapter, a cache salt and multimodal inputs on `arrive`. The fields round trip and a bad
value is a one-line error (exit 2 from `kvfuzz replay`); the oracle's rule of which keys a block
carries (`oracle/kvmanager/extra_keys.py`) on worked examples, and what it means for sharing:
equal tokens with other keys share nothing, equal keys share. With vLLM (slow): the released
manager runs the profile clean to its edge classes, and an oracle that leaves a key out (or
puts the salt on every block, or a LoRA name in no event) is told apart from it; vLLM's own
scheduler with salted and LoRA requests, guarded clean (a guard dropping the keys caught), a
multimodal request refused."""

from __future__ import annotations

import functools
import json

import pytest

from kvfuzz.fuzz.cli.main import main
from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.oracle.kvmanager import extra_keys as rule
from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec
from kvfuzz.strategies.kvmanager import extra_keys as profile
from kvfuzz.strategies.kvmanager.hashing import chain_from
from kvfuzz.strategies.kvmanager.describe import describe_op
from kvfuzz.strategies.kvmanager.trace import Arrive, RequestKeys, Schedule, Trace, to_json
from tests.helpers import agreeing_features, with_engine

LORA = RequestKeys(lora="a", lora_path="/adapters/a")
BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 8, "block_size": 2, "window": 0,
        "max_model_len": 64}


with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)


def arrival(**fields) -> dict:
    return {"op": "arrive", "rid": 1, "tokens": [1, 2, 3, 4, 5, 6], **fields}


# -- the trace format --------------------------------------------------------------------------
def test_the_fields_round_trip_and_a_keyless_arrival_reads_as_before():
    trace = profile.GENERATOR.generate(0, 0)
    assert codec.from_json(json.loads(json.dumps(to_json(trace)))) == trace
    assert any(op.keys for op in trace.ops if isinstance(op, Arrive))
    plain = to_json(Trace(4, 2, 0, 8, (Arrive(1, (1, 2)),)))
    assert plain["ops"][0] == {"op": "arrive", "rid": 1, "tokens": [1, 2]}
    keyed = Arrive(1, (1, 2, 3), lora="a", lora_path="/a", salt="s", images=(("i", 1, 2),))
    assert "LoRA 'a', salt 's', 'i' at 1+2" in describe_op(keyed)


@pytest.mark.parametrize("fields, named", [
    ({"lora": "a"}, "ops[0].lora_path"),                       # LoRARequest asserts a path
    ({"lora_path": "/a"}, "ops[0].lora_path"),
    ({"salt": 7}, "ops[0].salt"),
    ({"salt": "x" * 300}, "ops[0].salt"),
    ({"images": [["i", 4, 3]]}, "ops[0].images[0]"),           # past the prompt's 6 tokens
    ({"images": [["i", 2, 2], ["j", 3, 1]]}, "ops[0].images[1]"),  # overlapping
    ({"images": [["i", 0, 0]]}, "ops[0].images[0][2]"),
    ({"images": [["", 0, 1]]}, "ops[0].images[0][0]"),
    ({"images": [["i", 0]]}, "ops[0].images[0]"),
    ({"images": "i"}, "ops[0].images")])
def test_a_bad_key_is_a_one_line_error_naming_its_field(fields, named):
    with pytest.raises(FormatError) as error:
        codec.from_json(BASE | {"ops": [arrival(**fields)]})
    assert "\n" not in str(error.value) and f"field '{named}'" in str(error.value)


def test_kvfuzz_replay_of_a_bad_key_exits_2_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(BASE | {"ops": [arrival(images=[["i", 5, 3]])]}))
    assert main(["replay", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "images[0]" in err and "bad.json" in err, err


# -- the oracle's rule ---------------------------------------------------------------------------
def test_which_keys_a_block_carries():
    keys = RequestKeys("a", "/a", "s", (("x", 1, 4), ("y", 5, 1)))
    assert rule.block_extra_keys(keys, 0, 2) == (("lora", "a", "/a"), ("mm", "x", 1),
                                                 ("cache_salt", "s"))
    # an image on every block it overlaps, at its offset from the block's start; the salt on
    # the first block alone; the adapter on every block
    assert rule.block_extra_keys(keys, 2, 4) == (("lora", "a", "/a"), ("mm", "x", -1))
    assert rule.block_extra_keys(keys, 4, 6) == (("lora", "a", "/a"), ("mm", "x", -3),
                                                 ("mm", "y", 1))
    assert rule.block_extra_keys(keys, 6, 8) == (("lora", "a", "/a"),)
    assert rule.block_extra_keys(RequestKeys(salt="s"), 2, 4) is None


def hashes(tokens, keys):
    return chain_from(None, tokens, 2, 0, functools.partial(rule.block_extra_keys, keys))


def cached_hit(first: RequestKeys, second: RequestKeys, tokens=(9, 9, 9, 9, 5)) -> int:
    """The hit of a request with `second`'s keys after one with `first`'s cached the same
    tokens."""
    model = KVManagerModel(8, 2, 0, 64)
    model.request_keys[1] = first
    assert model.allocate_slots(1, hashes(tokens, first), len(tokens), 0, len(tokens), 0, [[]])
    return model.get_computed_blocks(hashes(tokens, second), len(tokens))[1]


@pytest.mark.parametrize("first, second, hit", [
    (LORA, LORA, 4), (LORA, RequestKeys(), 0),
    (LORA, RequestKeys(lora="a", lora_path="/adapters/a-v2"), 0),  # the name re-pointed
    (RequestKeys(salt="s"), RequestKeys(salt="s"), 4), (RequestKeys(salt="s"), RequestKeys(), 0),
    (RequestKeys(images=(("x", 2, 2),)), RequestKeys(images=(("x", 2, 2),)), 4),
    # the same tokens under another image: the blocks before it shared, none from it on
    (RequestKeys(images=(("x", 2, 2),)), RequestKeys(images=(("z", 2, 2),)), 2),
    # the same image a token later (its placeholders' tokens equal): its offset differs
    (RequestKeys(images=(("x", 1, 2),)), RequestKeys(images=(("x", 2, 2),)), 0)])
def test_equal_tokens_share_exactly_when_their_keys_are_equal(first, second, hit):
    assert cached_hit(first, second) == hit


def test_the_events_publish_the_adapters_name_the_images_and_the_salt():
    model = KVManagerModel(8, 2, 0, 64, events=True)
    keys = RequestKeys("a", "/a", "s", (("x", 1, 2),))
    model.request_keys[1] = keys
    model.allocate_slots(1, hashes((1, 2, 3, 4, 5), keys), 5, 0, 5, 0, [[]], tokens=(1, 2, 3, 4, 5))
    stored, = model.take_events()
    assert stored.extra_keys == (("a", ("x", 1), "s"), ("a", ("x", -1)))


# -- on the released manager (slow) --------------------------------------------------------------
@with_vllm
def test_the_released_manager_runs_the_profile_clean_to_its_edge_classes():
    from kvfuzz.fuzz.kvmanager.key_marks import MARKS

    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = set(+agreeing_features("kvmanager", vllm, (profile.GENERATOR.generate(0, index)
                                                        for index in range(12))))
    wanted = {*MARKS, "config: LoRA", "config: cache salt", "config: multimodal inputs",
              "config: KV events", "hit reported", "config: sliding window"}
    assert wanted <= events, sorted(wanted - events)


def broken(keys: RequestKeys, start: int, end: int):
    """A rule of kvfuzz's own gone wrong: the salt on every block."""
    found = rule.block_extra_keys(keys, start, end) or ()
    if keys.salt and start:
        found += (("cache_salt", keys.salt),)
    return found or None


@with_vllm
@pytest.mark.parametrize("where, wrong", [
    ("kvfuzz.fuzz.kvmanager.lock_request.block_extra_keys", broken),
    ("kvfuzz.fuzz.kvmanager.lock_request.block_extra_keys",
     lambda keys, start, end: rule.block_extra_keys(RequestKeys(), start, end)),
    ("kvfuzz.oracle.kvmanager.model.prompt",  # events without the adapter's name
     lambda hashes, tokens, keys: rule.prompt(hashes, tokens, keys and RequestKeys(
         "", "", keys.salt, keys.images)))])
def test_an_oracle_that_gets_the_keys_wrong_is_told_apart_from_the_release(
        monkeypatch, where, wrong):
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    monkeypatch.setattr(where, wrong)
    for index in range(8):
        outcome = KVMANAGER.check(profile.GENERATOR.generate(0, index), vllm)
        if outcome.status != AGREE:
            return
    pytest.fail(f"{where} broken: every trace still agrees")


def test_a_keyed_trace_is_short_work_for_the_shrinker():
    """Shorter prompts drop the images that no longer fit (a placeholder lies in its prompt),
    and each key can go on its own."""
    from kvfuzz.fuzz.kvmanager.target import _smaller_arrival

    op = Arrive(1, (1, 2, 3, 4), lora="a", lora_path="/a", salt="s", images=(("x", 2, 2),))
    smaller = list(_smaller_arrival(op))
    assert smaller[0].tokens == (1, 2, 3) and smaller[0].images == ()
    assert [o.keys for o in smaller[1:]] == [
        RequestKeys("", "", "s", (("x", 2, 2),)), RequestKeys("a", "/a", "", (("x", 2, 2),)),
        RequestKeys("a", "/a", "s", ())]
    for o in smaller:  # each still a valid file
        trace = Trace(8, 2, 0, 64, (o, Schedule(1, 4)))
        assert codec.from_json(json.loads(json.dumps(to_json(trace)))) == trace


# -- vLLM's own scheduler, guarded (slow) --------------------------------------------------------
@with_vllm
def test_salted_and_lora_requests_of_vllms_scheduler_are_guarded_clean_and_recorded(tmp_path):
    """Sessions whose requests carry cache salts and LoRA adapters (`EXTRA_KEYS`): each
    request's keys go into its `arrive`, and the guarded session agrees, as its recording does
    replayed. Before, the guard refused such a request."""
    import kvfuzz
    from tests.kvmanager.test_guard import scheduler_session

    keyed = 0
    for seed in range(2):
        session = scheduler_session(seed, None, tmp_path, workload="EXTRA_KEYS")
        guarded = session.manager.kvfuzz_session
        assert guarded.divergence is None and session.finished == session.requests
        arrivals = [op for op in guarded.ops if isinstance(op, Arrive)]
        keyed += sum(bool(op.salt) + bool(op.lora) for op in arrivals)
        recorded = scheduler_session(seed, None, tmp_path, check=False,
                                     workload="EXTRA_KEYS").manager.kvfuzz_session
        assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert keyed > 4


@with_vllm
def test_a_guarded_hasher_mutant_raises_in_vllms_scheduler(tmp_path):
    """The salt on every block (`salt_on_every_block`): the scheduler's requests are hashed by
    the engine's hasher, not the manager's, so the guard sees the released hashes there; the
    mutant's hasher reaches the oracle only through kvfuzz's own driver, so the guarded session
    of the released hasher agrees, and the mutant is caught by the batch judge on the file."""
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER
    from tests.kvmanager.test_guard import scheduler_session

    session = scheduler_session(0, None, tmp_path, check=False, workload="EXTRA_KEYS")
    trace = session.manager.kvfuzz_session.trace()
    mutant = KVMANAGER.catalogue.resolve("mutant.vllm.kvmanager.salt_on_every_block")
    assert KVMANAGER.check(trace, mutant).status != AGREE


@with_vllm
def test_the_guard_refuses_a_request_with_images_and_maps_a_salted_lora_one(tmp_path):
    """A multimodal request is refused before its lookup is made (the live sessions here have
    no multimodal model); a salted LoRA request arrives with its keys."""
    import kvfuzz
    from tests.kvmanager.test_guard import released_manager

    driver = released_manager()
    guarded = kvfuzz.guard(driver.manager, "kvmanager", corpus=tmp_path)
    driver.arrive(1, list(range(9)), images=(("x", 2, 3),))
    with pytest.raises(kvfuzz.GuardUnsupported, match="multimodal inputs"):
        guarded.get_computed_blocks(driver.requests[1])
    driver.arrive(2, list(range(9)), lora="a", lora_path="/a", salt="s")
    guarded.get_computed_blocks(driver.requests[2])
    arrived = guarded.kvfuzz_session.ops[-1]
    assert isinstance(arrived, Arrive) and arrived.tokens == tuple(range(9))
    assert arrived.keys == RequestKeys("a", "/a", "s")


@with_vllm
def test_a_guard_that_drops_the_keys_is_caught(monkeypatch, tmp_path):
    """The mapping is load-bearing: with each request's keys left out of its `arrive`, the
    oracle shares salted and LoRA blocks the live manager keeps apart (a prefix hit differs)."""
    import kvfuzz
    from kvfuzz.fuzz.kvmanager import guard_tracked
    from tests.kvmanager.test_guard import scheduler_session

    monkeypatch.setattr(guard_tracked, "_extra_keys", lambda request: {})
    with pytest.raises(kvfuzz.Mismatch, match="prefix hit"):
        scheduler_session(0, None, tmp_path, workload="EXTRA_KEYS")


class _Request:
    """What the edge-class counter reads of the lock step's request."""

    def __init__(self, tokens, keys):
        self.tokens, self.keys, self.skip = list(tokens), keys, False


def test_a_refused_hit_is_counted_by_the_key_that_differs():
    from collections import Counter

    from kvfuzz.fuzz.kvmanager.key_marks import KeyMarks

    counted, model, tokens = Counter(), KVManagerModel(8, 2, 0, 64), (9, 9, 9, 9, 5)
    marks = KeyMarks(lambda name: counted.update([name]), 2)

    def admit(rid, keys):
        request, chain = _Request(tokens, keys), hashes(tokens, keys)
        _, hit, _ = model.get_computed_blocks(chain, len(tokens))
        marks.admitted(request, chain, hit, model.pool)  # at the lookup, as the lock step
        model.request_keys[rid] = keys
        model.allocate_slots(rid, chain, len(tokens), 0, len(tokens) - hit, hit,
                             model.get_computed_blocks(chain, len(tokens))[0])
        return hit

    salted = RequestKeys(salt="s")
    assert admit(1, salted) == 0 and not counted
    assert admit(2, RequestKeys()) == 0 and counted == {"salted hit refused": 1}
    assert admit(3, salted) == 4 and counted["salted hit"] == 1
    counted.clear()
    image = RequestKeys(images=(("x", 2, 2),))
    assert admit(4, image) == 2 and counted == {"multimodal hit refused": 1}


# -- the newer profiles' requests carry extra keys too (no vllm needed) --------------------------
@pytest.mark.parametrize("name", ["lookahead_hashes", "eagle_groups", "mtp", "prompt_embeds"])
def test_a_newer_profile_draws_extra_keys_over_the_ops_it_makes_without_them(name, monkeypatch):
    """Each of the four draws LoRA adapters, salts and images on some of its arrivals
    (`extra_keys.with_keys`), from a stream of its own: the ops of a seed are those it makes
    with the keys left off (so its seeded indices keep their meaning)."""
    import importlib
    from dataclasses import replace

    module = importlib.import_module(f"kvfuzz.strategies.kvmanager.{name}")
    keyed = [module.GENERATOR.generate(0, index) for index in range(6)]
    arrivals = [op for trace in keyed for op in trace.ops if isinstance(op, Arrive)]
    assert all(any(getattr(op, key) for op in arrivals) for key in ("lora", "salt", "images"))
    assert any(not (op.lora or op.salt or op.images) for op in arrivals)  # some left bare
    monkeypatch.setattr(module, "with_keys", lambda rng, ops, block_size: (rng.random(),
                                                                           tuple(ops))[1])
    bare = [module.GENERATOR.generate(0, index) for index in range(6)]
    unkeyed = [tuple(replace(op, lora="", lora_path="", salt="", images=())
                     if isinstance(op, Arrive) else op for op in trace.ops) for trace in keyed]
    assert unkeyed == [trace.ops for trace in bare]
