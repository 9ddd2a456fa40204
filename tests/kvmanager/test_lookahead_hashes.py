"""Lookahead hashing (`kvmanager/5[lookahead hashes]`, `strategies/kvmanager/lookahead_hashes.py`):
the trace field and its one-line refusals; the rule of a block's hash under lookahead (made once
the tokens after it exist, covering them) on worked examples; with vLLM (slow), the released
manager runs the profile clean to its edge classes, and an oracle that hashes without the
lookahead is told apart from it. The mutant of vLLM's hasher (`lookahead_hash_early`) is caught
in `test_mutants.py`."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.lookahead_marks import MARKS
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec
from kvfuzz.strategies.kvmanager import lookahead_hashes as profile
from kvfuzz.strategies.kvmanager.hashing import chain, chain_from
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import agreeing_features, with_engine

BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 8, "block_size": 2, "window": 0,
        "max_model_len": 64, "ops": [], "hash_lookahead": 1}


with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)


def test_the_field_round_trips_and_bad_values_are_one_line_errors():
    trace = profile.GENERATOR.generate(0, 0)
    assert codec.from_json(to_json(trace)) == trace and trace.hash_lookahead > 0
    assert codec.from_json(BASE).hash_lookahead == 1
    assert "hash_lookahead" not in to_json(codec.from_json(BASE | {"hash_lookahead": 0}))
    for change in ({"hash_lookahead": -1}, {"hash_lookahead": 99}, {"caching": False},
                   {"eagle": True}, {"window": 4, "hash_block_size": 1},
                   {"dcp": 2},
                   # beside a Mamba "align" group taken (test_mamba_lookahead.py), but not with
                   # a KV connector's ops (vLLM keeps the legacy hashes with a connector)
                   {"mamba_mode": "align", "ops": [{"op": "connect", "rid": 1, "chunk": 2,
                                                    "external": 2}]}):
        with pytest.raises(FormatError) as error:
            codec.from_json(BASE | change)
        assert "\n" not in str(error.value) and "hash_lookahead" in str(error.value)


def test_a_block_is_hashed_once_its_lookahead_tokens_exist_and_covers_them():
    tokens = [1, 2, 3, 4, 5]
    assert len(chain_from(None, tokens, 2, lookahead=1)) == 2  # blocks [1 2], [3 4]: 5 follows
    assert len(chain_from(None, tokens[:4], 2, lookahead=1)) == 1  # [3 4] waits for a token
    assert len(chain_from(None, tokens, 2, lookahead=2)) == 1
    # the same blocks followed by another token: another first hash; without lookahead, equal
    assert chain_from(None, [1, 2, 9], 2, lookahead=1) != chain_from(None, [1, 2, 3], 2,
                                                                      lookahead=1)
    assert chain([1, 2, 9], 2) == chain([1, 2, 3], 2)
    # hashed on in steps (the lock step's way): the same chain
    first = chain_from(None, tokens[:3], 2, lookahead=1)
    assert first + chain_from(first[-1], tokens[2:], 2, 2, lookahead=1) == \
        chain_from(None, tokens, 2, lookahead=1)


@with_vllm
def test_the_released_manager_runs_the_profile_clean_to_its_edge_classes():
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", vllm, (profile.GENERATOR.generate(0, index)
                                                   for index in range(20)))
    wanted = [*MARKS, "config: lookahead hashing", "config: sliding window", "events published",
              "hit reported", "admission padded with placeholder drafts",
              "admission padded after a hit", "placeholder drafts past a block's end"]
    assert all(events[name] for name in wanted), {name: events[name] for name in wanted}


@with_vllm
def test_an_oracle_hashing_without_the_lookahead_is_told_apart():
    """The oracle's side of the rule is load-bearing: the lock step hashing the requests as
    if nothing looked ahead diverges from the released manager at once."""
    from kvfuzz.fuzz.kvmanager import lockstep

    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    trace = profile.GENERATOR.generate(0, 0)
    original = lockstep.KVManagerLockstep._hashes
    try:
        lockstep.KVManagerLockstep._hashes = lambda self, request: request.hashes(
            self.trace.hash_size)
        assert KVMANAGER.check(trace, vllm).status != AGREE
    finally:
        lockstep.KVManagerLockstep._hashes = original
    assert KVMANAGER.check(trace, vllm).status == AGREE
