"""A declared equivalent mutant of the offloading policy checked against its reason
(`impl/equivalent_mutants.json`): LRU `evict`'s loop `len(selected) < n` as `!= n` answers every
call of the contract (n >= 1; evict(0) returns first) exactly as the released policy does, on
seeded policy states with protected keys; and the comparison can see a difference: a negative
n, outside the contract, tells them apart, and so does the sibling `<= n` within it. Skips without
vLLM."""

from __future__ import annotations

import random

import pytest

from tests.helpers import mutant_module, needs_engine

pytestmark = needs_engine("vllm")
MUTANT = "vllm.v1.kv_offload.cpu.policies.lru:184:43:ReplaceComparisonOperator_Lt_NotEq:1"


def compiled(mutant_id: str):
    """The LRU policy class of a mutant's module, beside the released one."""
    return mutant_module("vllm.v1.kv_offload.cpu.policies.lru", mutant_id).LRUCachePolicy


@pytest.fixture(scope="module")
def policies():
    """(the released LRUCachePolicy, the declared mutant's)."""
    from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

    assert equivalent_reason()  # declared, with its reason
    return LRUCachePolicy, compiled(MUTANT)


def equivalent_reason() -> str:
    from kvfuzz.fuzz.engine.mutation.run import declared_equivalents

    return declared_equivalents().get(MUTANT, "")


def filled(cls, seed: int):
    """A policy of `cls` after a seeded series of inserts (some pinned), touches and request
    accesses, as the manager makes them; and its keys."""
    from vllm.v1.kv_offload.base import ReqContext
    from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

    rng = random.Random(seed)
    policy, keys = cls(cache_capacity=32), []
    for request in range(rng.randint(1, 4)):
        context = ReqContext(req_id=str(request))
        for position in range(rng.randint(1, 8)):
            key = bytes([request, position])
            context.set_offload_key_position(key, (position + 1) * 16)
            chunk = ChunkStatus(len(keys))
            chunk.ref_cnt = 0 if rng.random() < 0.8 else 1  # a pinned chunk is not evictable
            policy.insert(key, chunk, context)
            keys.append(key)
        if rng.random() < 0.5:
            policy.touch(rng.sample(keys, rng.randint(1, len(keys))), context)
        if rng.random() < 0.5:
            policy.on_request_access(rng.sample(keys, rng.randint(1, len(keys))), context)
    return policy, keys


def evicted(cls, seed: int, n: int):
    policy, keys = filled(cls, seed)
    protected = set(random.Random(seed + 1).sample(keys, len(keys) // 4))
    answer = policy.evict(n, protected)
    return None if answer is None else [key for key, _ in answer]


def test_the_mutant_answers_every_eviction_of_the_contract_as_the_release(policies):
    released, mutant = policies
    asked = 0
    for seed in range(40):
        for n in range(1, 34):  # up to past what the policy holds (then both refuse: None)
            assert evicted(released, seed, n) == evicted(mutant, seed, n), (seed, n)
            asked += 1
    assert asked == 40 * 33


def test_a_negative_count_outside_the_contract_tells_them_apart(policies):
    released, mutant = policies
    assert evicted(released, 0, -1) == []
    assert evicted(mutant, 0, -1)  # it evicts every evictable key: the comparison sees that


def test_the_comparison_tells_a_sibling_that_is_not_equivalent(policies):
    """`<= n` (selecting one more than asked) differs within the contract: the comparison above
    would see it."""
    released, _ = policies
    sibling = compiled(MUTANT.replace("Lt_NotEq", "Lt_LtE"))
    assert any(evicted(released, seed, n) != evicted(sibling, seed, n)
               for seed in range(5) for n in range(1, 8))
