"""Every profile of the `kvmanager` traces (`strategies/kvmanager/streams.profiles()`: the
corner profiles, the scheduler-shaped traces and each stream of the hybrid coordinator) comes
out of each of the three ways traces are made: the seeded run (`kvfuzz diff`), the fuzzer's
bytes (atheris: `from_bytes`) and the public Hypothesis strategy `kvfuzz.kvmanager_traces()`.
A profile the seeded generator has but a byte-fed run cannot reach is never fuzzed. No vLLM
needed."""

from __future__ import annotations

import random
import shlex
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import kvfuzz
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.kvmanager import streams
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.trace import to_json

# the mix's profiles (those made alone only, `streams.ALONE_ONLY`, are never drawn in it)
NOTES = [f"profile {name}" for name in streams.profiles() if name not in streams.ALONE_ONLY]
# the profiles made alone only until 2026-12-06, drawn in the mix since on shares of their own
# (and "streaming drafts" and "async streaming drafts", in the mix from their start), with the
# first index of seed 0's mix that each takes
ONCE_ALONE_ONLY = {"async connector": 293, "async drafts": 218, "full last": 282,
                   "streaming": 289, "async streaming": 333, "connector sizes": 337,
                   "hisparse cow": 225, "mamba connector": 254, "streaming drafts": 409,
                   "async streaming drafts": 380, "async pipeline": 301,
                   "connector cuts": 386}


def test_the_seeded_run_makes_every_profile_and_no_other():
    # 340: "observed"'s first two of the first 300 (176, 295) went to the "async outputs" and
    # "hisparse lag" streams (2026-12-05); its next is 321. 420: "streaming drafts" took the
    # widest open range of the mix (2026-12-06), whose first index is 409 (every open range
    # with an index below 340 then taken or too narrow for fuzzer bytes to reach)
    made = Counter(KVMANAGER.generator.generate(0, index).note for index in range(420))
    assert set(made) == set(NOTES), made


def test_fuzzer_bytes_reach_every_profile_and_no_other():
    # 500: since the profiles once alone only took their shares (2026-12-06), the first 300
    # held no "no caching" trace (a kvmanager/5 profile, its share 14% of what it was); 700
    # since "mamba connector" and "streaming drafts" took theirs (that day, later: the first
    # 500 held none either, kvmanager/5 then 10.7% of the draw)
    rng = random.Random(0)
    made = Counter(KVMANAGER.generator.from_bytes(rng.randbytes(rng.randint(0, 4096))).note
                   for _ in range(700))
    assert set(made) == set(NOTES), made
    # bytes that ran out (Hypothesis shrinks towards them) stay in the simplest stream
    assert KVMANAGER.generator.from_bytes(b"").origin is None
    assert KVMANAGER.generator.from_bytes(b"").note == \
        streams.generator.GENERATOR.from_bytes(b"").note


def test_a_stream_left_out_of_the_byte_decoder_is_seen():
    """The check above can fail: a decoder that feeds `kvmanager/5` alone (as it did before)
    reaches none of the hybrid coordinator's profiles, nor the connector's (nor its deferred
    frees'), nor decode context parallelism's, nor the streams added since."""
    rng = random.Random(0)
    base = streams.MixedStreams(streams.generator.GENERATOR, ())
    made = {base.from_bytes(rng.randbytes(rng.randint(0, 4096))).note for _ in range(300)}
    assert set(NOTES) - made == {f"profile {name}" for name in
                                 (*streams.hybrid.PROFILES, *streams.connector.PROFILES,
                                  *streams.deferred.PROFILES, *streams.dcp.PROFILES,
                                  *streams.extra_keys.PROFILES,
                                  *streams.lookahead_hashes.PROFILES,
                                  *streams.eagle_groups.PROFILES, *streams.mtp.PROFILES,
                                  *streams.prompt_embeds.PROFILES,
                                  *streams.hisparse.PROFILES,
                                  *streams.hisparse_import.PROFILES,
                                  *streams.lone_window.PROFILES,
                                  *streams.two_windows.PROFILES,
                                  *streams.async_outputs.PROFILES,
                                  *streams.hisparse_lag.PROFILES,
                                  *ONCE_ALONE_ONLY)}


def test_every_stream_of_the_mix_has_the_byte_prefixes_of_its_share():
    """`from_bytes` picks a stream by its first two bytes with the seeded draw's shares: each
    stream (those of the profiles once alone only among them) is picked by the 2-byte
    prefixes of its share, and the rest of the bytes make a trace of its profile."""
    generator, rng = KVMANAGER.generator, random.Random(1)
    for stream, low, high in streams.STREAMS:
        prefixes = [v for v in range(1 << 16) if low <= 1.0 - v / (1 << 16) < high]
        assert abs(len(prefixes) / (1 << 16) - (high - low)) < 1e-4, stream.name
        for v in (prefixes[0], prefixes[-1]):
            trace = generator.from_bytes(v.to_bytes(2, "big") + rng.randbytes(2048))
            assert trace.note == f"profile {streams.GENERATOR.profile_of(stream.name)}", \
                stream.name
            assert trace.origin is None  # bytes-made: no seeded origin


def test_the_hypothesis_strategy_produces_every_profile():
    made = Counter()

    # derandomized: the newest profiles take 1-1.5% of the mix each, and 300 random draws
    # missed one about one run in twenty (the quick tier failed so once, 2026-12-05)
    @settings(database=None, max_examples=300, deadline=None, phases=[Phase.generate],
              derandomize=True, suppress_health_check=list(HealthCheck))
    @given(kvfuzz.kvmanager_traces())
    def draw(trace):
        made[trace.note] += 1

    draw()
    assert set(made) == set(NOTES), made


# -- one profile alone (`kvfuzz diff kvmanager --profile NAME`) ----------------------------------
def test_each_profile_alone_makes_only_its_own_traces():
    assert set(KVMANAGER.profiles()) == set(streams.profiles())
    for profile in KVMANAGER.profiles():
        alone = KVMANAGER.alone(profile).generator
        made = [alone.generate(0, index) for index in range(8)]
        assert {trace.note for trace in made} == {f"profile {profile}"}, profile
        assert {KVMANAGER.generator.profile_of(trace.origin) for trace in made} == {profile}
        assert [trace.origin.index for trace in made] == list(range(8))


def test_the_replay_line_regenerates_a_trace_of_each_profile_and_of_the_mix():
    """A report's `original` line (`Target.regenerate_command`), parsed as the command line
    parses it, makes the same trace again: with `--profile` for a profile alone and for a
    trace of a profile's own stream in the mix, without it for the mix's `kvmanager/5`."""
    from kvfuzz.fuzz.cli.main import parse

    def regenerated(line):
        args = parse(shlex.split(line)[1:])
        assert (args.cases, args.impl) == (1, ["vllm.kvmanager"])
        return KVMANAGER.alone(args.profile).generator.generate(args.seed, args.start), args

    traces = [KVMANAGER.alone(p).generator.generate(3, 41) for p in KVMANAGER.profiles()]
    mixed = [KVMANAGER.generator.generate(3, index) for index in range(12)]
    for trace in traces + mixed:
        line = KVMANAGER.regenerate_command(trace, "vllm.kvmanager")
        again, args = regenerated(line)
        assert again == trace and again.origin == trace.origin, line
        in_mix = trace.origin.generator == "kvmanager/5"
        assert (args.profile is None) == in_mix, line
        assert in_mix or args.profile == trace.note.removeprefix("profile "), line
    assert any(t.origin.generator == "kvmanager/5" for t in mixed)
    assert any(t.origin.generator != "kvmanager/5" for t in mixed)


def test_the_mix_is_unchanged_by_the_profiles_alone():
    """The mix draws the same traces as before (tests/engine/test_generators_pinned.py pins
    three); a corner profile alone is a stream of its own name, not the mix's indices."""
    alone = KVMANAGER.alone("corners").generator.generate(0, 0)
    assert alone.origin.generator == "kvmanager/5[corners]"
    assert KVMANAGER.generator.generate(0, 0).origin.generator == "kvmanager/5"


def test_a_profile_it_does_not_have_is_a_value_error_naming_the_profiles():
    import pytest

    with pytest.raises(ValueError, match="kvmanager has no generator profile 'nope'; its "
                                         "profiles: scheduler, corners"):
        KVMANAGER.alone("nope")
    assert KVMANAGER.alone(None) is KVMANAGER


def test_diff_help_explains_profile_and_names_every_profile(capsys):
    import pytest

    from kvfuzz.fuzz.cli.main import parse

    with pytest.raises(SystemExit):
        parse(["diff", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--profile NAME" in text and "from a seeded stream of its own" in text
    assert all(repr(profile) in text for profile in streams.profiles())


@pytest.mark.parametrize("profile", sorted({*streams.ALONE_ONLY, *ONCE_ALONE_ONLY}))
def test_each_profile_alone_only_or_once_is_drawn_as_it_says_and_its_traces_read_back(profile):
    """A profile made alone only (`streams.ALONE_ONLY`): no share of the mix draws it (its
    layout, the pinned indices and the bytes' picks stay as they were); one that was until
    2026-12-06 is drawn on a share of its own, from its first index of seed 0's mix on. Either
    way `--profile` runs its own stream, every field of its traces is within the codec's
    bounds (a divergence's corpus file reads back), and its byte-fed twin ends on any bytes,
    those that ran out included."""
    generator = streams.ALONE[profile]
    shares = [(low, high) for stream, low, high in streams.STREAMS if stream is generator]
    if profile in streams.ALONE_ONLY:
        assert not shares and f"kvmanager/5[{profile}]" not in streams.GENERATOR.layout
    else:
        first = ONCE_ALONE_ONLY[profile]
        assert shares and f"kvmanager/5[{profile}]@" in streams.GENERATOR.layout
        assert first == next(i for i in range(1000) if streams.GENERATOR.stream(0, i) is generator)
        assert streams.GENERATOR.generate(0, first) == generator.generate(0, first)
    assert streams.GENERATOR.alone(profile).generate(0, 3) == generator.generate(0, 3)
    for index in range(40):
        trace = generator.generate(0, index)
        assert trace.note == f"profile {profile}" and from_json(to_json(trace)) == trace
    rng = random.Random(0)
    for data in [b""] + [rng.randbytes(rng.randint(1, 4096)) for _ in range(30)]:
        trace = generator.from_bytes(data)
        assert from_json(to_json(trace)).ops == trace.ops


def test_the_shares_since_kept_every_index_something_relies_on():
    """The profiles once alone only took their shares by `STREAMS`' rule: every index the tests,
    CI, `kvfuzz mutate`'s default cases and the corpus rely on (`mix_shares.relied()`: seed 0's
    first 200 among them) draws the stream it drew before, and none draws a share of theirs."""
    from tests.kvmanager.mix_shares import clashes, relied

    once = {streams.ALONE[profile] for profile in ONCE_ALONE_ONLY}
    before = streams.MixedStreams(streams.generator.GENERATOR,
                                  [row for row in streams.STREAMS if row[0] not in once])
    for seed, indices in relied().items():
        assert [before.stream(seed, i) for i in sorted(indices)] == \
            [streams.GENERATOR.stream(seed, i) for i in sorted(indices)], seed
    assert not any(clashes(low, high) for stream, low, high in streams.STREAMS if stream in once)
