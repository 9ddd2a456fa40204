"""Prompts given as embeddings (`kvmanager/5[prompt embeds]`,
`strategies/kvmanager/prompt_embeds.py`): the `embeds` field of an arrival round trips and
refuses a bad value in one line; the oracle's
rule (token ids zeros, a digest of each block's embeddings in its extra keys) on worked
examples; with vLLM (slow), the released manager runs the profile clean to its edge classes,
and an oracle that leaves the digest out is told apart from it. The mutant of vLLM's hasher
(`embeds_key_dropped`) is caught in `test_mutants.py`."""

from __future__ import annotations

import hashlib
import struct

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.embeds_marks import MARKS
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.oracle.kvmanager import extra_keys as rule
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec
from kvfuzz.strategies.kvmanager import prompt_embeds as profile
from kvfuzz.strategies.kvmanager.describe import describe_op
from kvfuzz.strategies.kvmanager.trace import Arrive, RequestKeys, to_json
from tests.helpers import agreeing_features, with_engine

BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 8, "block_size": 2, "window": 0,
        "max_model_len": 64}


with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)


def test_the_field_round_trips_and_a_bad_value_is_one_line():
    trace = profile.GENERATOR.generate(0, 0)
    assert codec.from_json(to_json(trace)) == trace
    assert any(op.embeds for op in trace.ops if isinstance(op, Arrive))
    op = Arrive(1, (5, 6, 7), embeds=True)
    assert op.token_ids == (0, 0, 0) and op.keys.embeds == (5, 6, 7)
    assert "as embeddings" in describe_op(op)
    with pytest.raises(FormatError) as error:
        codec.from_json(BASE | {"ops": [{"op": "arrive", "rid": 1, "tokens": [1],
                                         "embeds": "yes"}]})
    assert "\n" not in str(error.value) and "ops[0].embeds" in str(error.value)


def test_each_block_carries_a_digest_of_its_embeddings():
    keys = RequestKeys(embeds=(5, 6, 7))
    digest = hashlib.sha256(struct.pack("<2f", 5.0, 6.0)).digest()
    assert rule.block_extra_keys(keys, 0, 2) == (("prompt_embeds", digest),)
    # past the prompt: the embeddings there are (one), then none
    assert rule.block_extra_keys(keys, 2, 4) == (
        ("prompt_embeds", hashlib.sha256(struct.pack("<f", 7.0)).digest()),)
    assert rule.block_extra_keys(keys, 4, 6) == (("prompt_embeds", hashlib.sha256().digest()),)
    assert rule.block_extra_keys(RequestKeys(embeds=(5, 9, 7)), 0, 2) != \
        rule.block_extra_keys(keys, 0, 2)


@with_vllm
def test_the_released_manager_runs_the_profile_clean_to_its_edge_classes():
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", vllm, (profile.GENERATOR.generate(0, index)
                                                   for index in range(12)))
    wanted = [*MARKS, "config: prompt embeddings", "events published", "config: sliding window"]
    assert all(events[name] for name in wanted), {name: events[name] for name in wanted}


@with_vllm
def test_an_oracle_without_the_digest_is_told_apart():
    """The digest is load-bearing: the oracle's keys without it diverge from the released
    manager (index 0 of the profile)."""
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    trace = profile.GENERATOR.generate(0, 0)
    original = rule.block_extra_keys
    try:
        rule.block_extra_keys = lambda keys, start, end: original(
            RequestKeys(keys.lora, keys.lora_path, keys.salt, keys.images), start, end)
        from kvfuzz.fuzz.kvmanager import lock_request
        saved, lock_request.block_extra_keys = (lock_request.block_extra_keys,
                                                rule.block_extra_keys)
        try:
            assert KVMANAGER.check(trace, vllm).status != AGREE
        finally:
            lock_request.block_extra_keys = saved
    finally:
        rule.block_extra_keys = original
    assert KVMANAGER.check(trace, vllm).status == AGREE
