"""A one-token prompt loaded whole by a KV connector beside a Mamba "align" group, looked up
again while it holds its blocks (`fuzz/kvmanager/align_external_single.py`; the "mamba
connector" profile makes it since 2026-12-07): the profile's traces with one (and only those
changed: the rest keep their ops, checked by the figures in docs/upstream-vllm.md); the release
runs such traces clean, the lookup again followed by the plain step or by a load again; a
double whose manager takes fresh blocks for the request that holds its own (freeing those
first, as for a new request), on either path, is caught. Skips without vLLM but the
generator's test."""

import functools

import pytest

from kvfuzz.strategies.kvmanager import mamba_connector
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule
from tests.helpers import divergence, double, needs_engine

# index 8 of seed 0: a one-token prompt loaded whole, then its plain step (twice);
# index 65: looked up again twice, once loaded again
PLAIN, AGAIN = 8, 65


def _after_whole_load(trace):
    """The ops of one-token prompts right after their load was reported."""
    ones = {op.rid for op in trace.ops if isinstance(op, Arrive) and len(op.tokens) == 1}
    return [b for a, b in zip(trace.ops, trace.ops[1:])
            if isinstance(a, Loaded) and a.rid in ones and isinstance(b, (Connect, Schedule))
            and b.rid == a.rid]


def test_the_profile_loads_one_token_prompts_and_asks_the_connector_again():
    kinds = set()
    for index in (PLAIN, AGAIN):
        trace = mamba_connector.GENERATOR.generate(0, index)
        ones = {op.rid for op in trace.ops if isinstance(op, Arrive) and len(op.tokens) == 1}
        assert any(isinstance(op, Connect) and op.load and op.rid in ones for op in trace.ops)
        for op in _after_whole_load(trace):
            assert not isinstance(op, Connect) or op.load or op.external == 0, op
            kinds.add("load" if isinstance(op, Connect) and op.load else type(op).__name__)
    assert {"load", "Schedule"} <= kinds, kinds


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class (built on first use, never at collection) whose
    allocation of a waiting request with no computed token that holds blocks frees them first,
    as for a new request: at its plain step (`ext` False) or at a load again (`ext` True)."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    def fresh(ext: bool):
        class Fresh(KVCacheManager):
            def allocate_slots(self, request, num_new_tokens, *args, **kwargs):
                external = kwargs.get("num_external_computed_tokens", 0)
                holds = any(m.req_to_blocks.get(request.request_id)
                            for m in self.coordinator.single_type_managers)
                if holds and not request.num_computed_tokens and bool(external) == ext:
                    self.coordinator.free(request.request_id)
                return super().allocate_slots(request, num_new_tokens, *args, **kwargs)
        return Fresh

    return {"FreshAtPlainStep": fresh(False), "FreshAtLoadAgain": fresh(True)}


def __getattr__(name: str):
    if name in ("FreshAtPlainStep", "FreshAtLoadAgain"):
        return doubles()[name]
    raise AttributeError(name)


@_ENGINE[0]
@_ENGINE[1]
def test_the_release_runs_the_lookups_again_clean():
    from kvfuzz.fuzz.kvmanager import align_external_single as single
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    seen: dict = {}
    for index in (PLAIN, AGAIN):
        outcome = KVMANAGER.check(mamba_connector.GENERATOR.generate(0, index),
                                  KVMANAGER.catalogue.resolve("vllm.kvmanager"))
        assert outcome.status == "agree", outcome.divergence and outcome.divergence.report()
        for event in single.EVENTS:
            seen[event] = seen.get(event, 0) + outcome.features.get(event, 0)
    assert all(seen.values()), seen


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken, index, label", [
    ("FreshAtPlainStep", PLAIN, "external blocks"), ("FreshAtLoadAgain", AGAIN, "external blocks")])
def test_fresh_blocks_for_a_request_that_holds_its_own_are_caught(broken, index, label):
    found = divergence("kvmanager", mamba_connector.GENERATOR.generate(0, index),
                       double("kvmanager", f"{__name__}:{broken}"))
    assert found is not None and found.what.startswith(label), found and found.report()
