"""Every profile of the `kvmanager` traces (`strategies/kvmanager/streams.profiles()`: the
corner profiles, the scheduler-shaped traces and each stream of the hybrid coordinator) comes
out of each of the three ways traces are made: the seeded run (`kvfuzz diff`), the fuzzer's
bytes (atheris: `from_bytes`) and the public Hypothesis strategy `kvfuzz.kvmanager_traces()`.
A profile the seeded generator has but a byte-fed run cannot reach is never fuzzed. No vLLM
needed."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, Phase, given, settings

import kvfuzz
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.kvmanager import streams

NOTES = [f"profile {name}" for name in streams.profiles()]


def test_the_seeded_run_makes_every_profile_and_no_other():
    made = Counter(KVMANAGER.generator.generate(0, index).note for index in range(300))
    assert set(made) == set(NOTES), made


def test_fuzzer_bytes_reach_every_profile_and_no_other():
    rng = random.Random(0)
    made = Counter(KVMANAGER.generator.from_bytes(rng.randbytes(rng.randint(0, 4096))).note
                   for _ in range(300))
    assert set(made) == set(NOTES), made
    # bytes that ran out (Hypothesis shrinks towards them) stay in the simplest stream
    assert KVMANAGER.generator.from_bytes(b"").origin is None
    assert KVMANAGER.generator.from_bytes(b"").note == \
        streams.generator.GENERATOR.from_bytes(b"").note


def test_a_stream_left_out_of_the_byte_decoder_is_seen():
    """The check above can fail: a decoder that feeds `kvmanager/5` alone (as it did before)
    reaches none of the hybrid coordinator's profiles, nor the connector's (nor its deferred
    frees'), nor decode context parallelism's."""
    rng = random.Random(0)
    base = streams.MixedStreams(streams.generator.GENERATOR, ())
    made = {base.from_bytes(rng.randbytes(rng.randint(0, 4096))).note for _ in range(300)}
    assert set(NOTES) - made == {f"profile {name}" for name in
                                 (*streams.hybrid.PROFILES, *streams.connector.PROFILES,
                                  *streams.deferred.PROFILES, *streams.dcp.PROFILES)}


def test_the_hypothesis_strategy_produces_every_profile():
    made = Counter()

    @settings(database=None, max_examples=300, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(kvfuzz.kvmanager_traces())
    def draw(trace):
        made[trace.note] += 1

    draw()
    assert set(made) == set(NOTES), made
