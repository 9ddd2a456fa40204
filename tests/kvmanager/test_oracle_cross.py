"""The KV-cache-manager oracle with a cross-attention group (an encoder-decoder model's decoder,
vLLM 0.33.0's `CrossAttentionManager`, prefix caching off): the encoder's blocks taken at each
admission (the scheduler's `num_encoder_tokens`, passed while a request has computed nothing)
and held, whole, until the request is freed; and the trace field's one-line errors. Pure
Python."""

import pytest

from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec, hybrid
from kvfuzz.strategies.kvmanager.hashing import chain
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.kvmanager.test_oracle_hybrid import admit


def test_an_admission_takes_the_encoders_blocks_and_later_steps_none():
    # Blocks of 4, 7 encoder tokens: two cross-attention blocks whatever the prompt.
    model = KVManagerModel(blocks=12, block_size=4, window=0, max_model_len=100,
                           caching=False, encoder_tokens=7)
    tokens = list(range(1, 11))  # 10 tokens: 3 blocks
    got, (blocks, hit, _) = admit(model, 1, tokens)
    assert (blocks, hit, got) == ([[], []], 0, [[1, 2, 3], [4, 5]]) and model.predicted == 5
    # Decoding into a new block: the decoder's group alone grows.
    hashes = chain(tokens + [9, 9, 9], 4)
    assert model.allocate_slots(1, hashes, 13, 10, 3, 0, None, tokens=tokens + [9, 9, 9]) \
        == [[6], []]
    # Handed out whole (the encoder's tokens, not the request's), freed with the request.
    assert model.block_ids_for_computed_tokens(1, 4) == [[1], [4, 5]]
    model.free(1)
    assert model.pool.num_free() == 11


def test_a_preempted_request_takes_the_encoders_blocks_again():
    model = KVManagerModel(blocks=6, block_size=2, window=0, max_model_len=100,
                           caching=False, encoder_tokens=3)
    admit(model, 1, [1, 2, 3])
    model.free(1)  # preempted: its blocks go back
    got, _ = admit(model, 1, [1, 2, 3])
    assert [len(ids) for ids in got] == [2, 2]
    # Five blocks free: a prompt of 4 blocks and the encoder's 2 do not fit.
    model.free(1)
    got, _ = admit(model, 2, [1, 2, 3, 4, 5, 6, 7])
    assert got is None and model.predicted == 6


def test_the_field_round_trips_and_vllms_refusals_are_one_line_errors():
    trace = hybrid.CROSS.generate(0, 1)
    assert codec.from_json(to_json(trace)) == trace and trace.encoder_tokens > 0
    base = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 8, "block_size": 4, "window": 0,
            "max_model_len": 64, "ops": [], "encoder_tokens": 5, "caching": False}
    for change in ({"caching": True}, {"window": 3}, {"local_chunk": 4},
                   {"mamba_mode": "none"}, {"encoder_tokens": -1}):
        with pytest.raises(FormatError) as error:
            codec.from_json(base | change)
        assert "\n" not in str(error.value) and ("encoder_tokens" in str(error.value) or
                                                 "mamba_mode" in str(error.value) or
                                                 "local_chunk" in str(error.value))
