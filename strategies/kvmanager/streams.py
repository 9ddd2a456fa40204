"""The `kvmanager` target's seeded traces: `kvmanager/5` (generator.py) with the streams of
newer configuration profiles mixed in. Standard library only.

A profile added later gets a stream of its own (its own generator name, so it can change without
touching another), and a share of the indices: whether input `index` of `seed` is a new profile's is
drawn from (MIX, seed, index) alone (a range of that draw per stream), so every other index is still
`kvmanager/5`'s trace of that seed and index, as before the profile came. An input's origin names
the stream it came from, with the seed and index that `kvfuzz diff kvmanager --seed S --start I`
regenerates it from. Fuzzer bytes (`from_bytes`, which atheris and the public Hypothesis strategy
`kvfuzz.kvmanager_traces()` decode) reach every stream too: their first two bytes pick it with the
seeded draw's shares, the rest feed it.

One profile alone (`kvfuzz diff kvmanager --profile NAME`, `ALONE`): the stream that makes it
in the mix, or for `kvmanager/5`'s own profiles a stream of each (`kvmanager/5[corners]`, ...);
every index of it is that profile's, and its origin names that stream, which the replay line
turns back into `--profile NAME` (`MixedStreams.profile_of`).
"""

from __future__ import annotations

from kvfuzz.strategies.kvmanager import (async_outputs, connector, dcp, deferred, eagle_groups,
                                         extra_keys, generator, hisparse, hisparse_import,
                                         hisparse_lag, hybrid, lone_window, lookahead_hashes, mtp,
                                         prompt_embeds, two_windows)
from kvfuzz.strategies.kvmanager import async_connector, async_drafts, full_last, streaming_input
from kvfuzz.strategies.kvmanager import async_pipeline, connector_cuts
from kvfuzz.strategies.kvmanager import async_streaming, connector_sizes
from kvfuzz.strategies.kvmanager import hisparse_cow, mamba_connector, streaming_drafts
from kvfuzz.strategies.kvmanager import async_streaming_drafts, capped_hits, sync_drafts
from kvfuzz.strategies.kvmanager import capped_connector, capped_hisparse, capped_mamba
from kvfuzz.strategies.kvmanager import mamba_plain
from kvfuzz.strategies.sources import BytesRandom, TraceGenerator, seeded_random

MIX = "kvmanager/mix"
# (stream, the range of the draw it takes): a new stream takes a range no other one had, so an
# index keeps its trace when a stream is added (and the pinned indices stay kvmanager/5's)
STREAMS = ((hybrid.GENERATOR, 0.0, 0.15), (hybrid.LOCAL, 0.9, 1.0),
           (hybrid.MAMBA, 0.82, 0.875), (hybrid.EAGLE, 0.40, 0.46),
           (hybrid.CROSS, 0.46, 0.51), (hybrid.MAMBA_ALIGN, 0.51, 0.55),
           (connector.GENERATOR, 0.55, 0.62), (deferred.GENERATOR, 0.62, 0.66),
           # a second share for "mamba align" (2026-12-04, from kvmanager/5's rest; indices 0
           # to 2 kept): with 4% alone, 2 of seed 0's first 200 were align traces, neither with
           # a Mamba hit inside a block, so `kvfuzz mutate`'s 200 cases killed no mutant of
           # MambaManager's fine-grained lookup; now 11, three with such hits
           (hybrid.MAMBA_ALIGN, 0.74, 0.785),
           # decode context parallelism (2026-12-04, from kvmanager/5's rest): 7 of the first 200
           (dcp.GENERATOR, 0.785, 0.81),
           # requests with extra hash keys: LoRA, cache salts, images (2026-12-04, from
           # kvmanager/5's rest, a range none of the pinned or tests' indices draw): 4 of the
           # first 300
           (extra_keys.GENERATOR, 0.30, 0.325),
           # lookahead hashing (2026-12-04, from kvmanager/5's rest, a range none of the pinned
           # or tests' indices draw): 5 of the first 300, from index 101
           (lookahead_hashes.GENERATOR, 0.81, 0.82),
           # EAGLE groups flagged apart (2026-12-04, the same): 4 of the first 300, from 13
           (eagle_groups.GENERATOR, 0.165, 0.18),
           # multi-token prediction (2026-12-04, the same): 3 of the first 300, from 206
           (mtp.GENERATOR, 0.195, 0.21),
           # prompt embeddings (2026-12-04, the same): 2 of the first 300, from 10
           (prompt_embeds.GENERATOR, 0.34, 0.355),
           # HiSparse's groups (2026-12-05, from kvmanager/5's rest, a range none of the pinned
           # or tests' indices draw): 3 of the first 200 (73, 147, 182)
           (hisparse.GENERATOR, 0.325, 0.34),
           # a second connector's imports into HiSparse's host pool (2026-12-05, from
           # kvmanager/5's rest, a range none of the pinned or tests' indices draw): 5 of the
           # first 300 (40, 99, 125, 156, 227)
           (hisparse_import.GENERATOR, 0.265, 0.28),
           # second shares for "mtp" and "eagle window" (2026-12-05, issue 25's coordinator
           # sample, from kvmanager/5's rest, ranges none of the pinned or tests' indices
           # draw, indices 0 to 2 and CI's 500 to 509 kept): the first 200 of seed 0 held no
           # "mtp" trace, so `kvfuzz mutate`'s 200 cases never held re-prefillable tokens
           # back (num_prefill_lookahead 0 everywhere); now 6 (11, 25, 54, 81, 100, 194).
           # "eagle window" had 10, none whose hit runs up to the hashed tokens' end (the
           # lookup's cap); now 2 more (53, 154), 53 with such a hit
           (mtp.GENERATOR, 0.15, 0.165), (hybrid.EAGLE, 0.885, 0.90),
           # a lone sliding window under the unitary coordinator (2026-12-05, issue 25's
           # coordinator sample, from kvmanager/5's rest, a range none of the pinned or tests'
           # indices draw, the first 60 and CI's 500 to 509 kept): before it no trace's one group
           # was a window, where the unitary coordinator's EAGLE bit moves the window's block
           # mask; 3 of the first 200 (82, 92, 198)
           (lone_window.GENERATOR, 0.66, 0.675),
           # two sliding windows, the hybrid coordinator's multi-pass hit search (2026-12-05,
           # issue 25's coordinator sample, from kvmanager/5's rest, none of the first 60 and
           # CI's 500 to 509 drawn): before it no trace took a second pass with EAGLE, where
           # the search's `eagle_verified` bookkeeping matters; 5 of the first 200 (66, 96, 113,
           # 120, 165), 113 a hit the bookkeeping changes
           (two_windows.GENERATOR, 0.6815, 0.6935),
           # HiSparse's worker reporting write-backs late, out of order and in parts (2026-12-05,
           # issue 24's varying lag, from kvmanager/5's rest, none of the first 60, the tests'
           # indices or CI's 500 to 509 drawn): 5 of the first 200 (70, 102, 115, 133, 192)
           (hisparse_lag.GENERATOR, 0.2125, 0.2275),
           # vLLM's asynchronous scheduler's own ops: output placeholders, processed outputs,
           # stale output after a preemption (2026-12-05, issue 24, from kvmanager/5's rest,
           # none of the first 60, the tests' indices or CI's 500 to 509 drawn): 5 of the
           # first 300 (176, 187, 209, 278, 295)
           (async_outputs.GENERATOR, 0.7050, 0.7145),
           # the four profiles once made alone only, so that atheris and the Hypothesis strategy
           # reach them too (2026-12-06, issue 24), each from kvmanager/5's rest where no index
           # the tests, CI's 500 to 509, `kvfuzz mutate`'s default cases (seed 0's first 200,
           # all kept) or the corpus rely on draws: a KV connector under the asynchronous
           # scheduler, 1 of the first 300 (293); its draft tokens, 2 (218, 279); full
           # attention's group ordered last, 1 (282); resumable (streaming-input) requests, 1
           # (289). A new stream's share: `python -m tests.kvmanager.mix_shares` lists the
           # ranges left by this rule, widest first, and what each takes of the first 300
           (async_connector.GENERATOR, 0.2557, 0.2649), (async_drafts.GENERATOR, 0.3629, 0.3719),
           (full_last.GENERATOR, 0.3550, 0.3628), (streaming_input.GENERATOR, 0.3720, 0.3784),
           # resumable requests under the asynchronous scheduler (2026-12-06, issue 24; alone
           # only for an hour, then a share by the same rule, the widest open range): none of
           # the first 300 of seed 0, 1 of the first 340 (333)
           (async_streaming.GENERATOR, 0.2829, 0.2941),
           # a KV connector over groups of different block sizes (2026-12-06, issue 24; alone
           # only until merged, then by the same rule the open range that takes one of seed
           # 0's first 340, where `test_profiles.py` wants every profile): 337
           (connector_sizes.GENERATOR, 0.2942, 0.3000),
           # HiSparse's host copy-on-write: its four groups beside a Mamba "align" group hashed
           # below the block, partial local hits in the host pool (2026-12-06, issue 24; alone
           # only until merged, then the open range taking one of seed 0's first 340 without
           # "observed"'s 321, which that test needs): 225, 309, 346
           (hisparse_cow.GENERATOR, 0.7366, 0.7400),
           # a KV connector's loads beside a Mamba "align" group (2026-12-06, issue 24; by the
           # same rule, the open range taking one of seed 0's first 340): 254
           (mamba_connector.GENERATOR, 0.7150, 0.7190),
           # resumable requests under the synchronous scheduler with draft tokens and lookahead
           # hashing (2026-12-06, issue 24; by the same rule, the widest open range, whose first
           # index of seed 0, 409, `test_profiles.py`'s seeded run reaches since): 409
           (streaming_drafts.GENERATOR, 0.2358, 0.2452),
           # resumable requests under the asynchronous scheduler with draft tokens (2026-12-06,
           # issue 24; by the same rule, the one open range whose first index of seed 0, 380,
           # the seeded run's 420 reach; the widest's first is 426): 380
           (async_streaming_drafts.GENERATOR, 0.2292, 0.2357),
           # two steps of a request in flight under the V2 runner's pipeline (2026-12-06, issue
           # 24; alone only for a day, then by the same rule the open range taking one of seed
           # 0's first 340, and the open range beside it, whose first is 1412): 301, 373
           (async_pipeline.GENERATOR, 0.7284, 0.7316), (async_pipeline.GENERATOR, 0.7317, 0.7347),
           # a synchronous load's failed block and the running requests it cuts (2026-12-06,
           # issue 24; by the same rule, the open range taking one of seed 0's first 420, with
           # the widest of those taking none of its first 520): 386
           (connector_cuts.GENERATOR, 0.2800, 0.2828), (connector_cuts.GENERATOR, 0.8786, 0.8850),
           # draft tokens under the synchronous scheduler (2026-12-06, issue 24; the range the
           # brief assigned, open by the same rule, none of seed 0's first 300)
           (sync_drafts.GENERATOR, 0.3830, 0.3901))


class MixedStreams:
    """A `TraceGenerator` in what the engine asks of one (`generate`, `from_bytes`); `alone`
    maps each profile to the stream that makes it alone (`kvfuzz diff --profile`)."""

    def __init__(self, base: TraceGenerator, streams, alone: dict | None = None):
        self.base, self.streams = base, tuple(streams)
        self.name, self.build = base.name, base.build
        # Which stream each index draws: a results file of `kvfuzz mutate` holds verdicts for one
        # layout, and a share moved to a new stream changes the traces under the same name.
        self.layout = ";".join(f"{stream.name}@{low}-{high}" for stream, low, high in self.streams)
        self.num_ops, self.max_fuzz_ops = base.num_ops, base.max_fuzz_ops
        self.alone_streams = dict(alone or {})

    def profiles(self) -> tuple[str, ...]:
        return tuple(self.alone_streams)

    def alone(self, profile: str) -> "MixedStreams":
        """Traces of `profile` alone: input `index` of `seed` is its stream's (a ValueError
        naming the profiles where there is no such profile)."""
        if profile not in self.alone_streams:
            raise ValueError(f"no profile {profile!r}; the profiles: "
                             f"{', '.join(self.alone_streams)}")
        return MixedStreams(self.alone_streams[profile], (), self.alone_streams)

    def profile_of(self, generator: str) -> str | None:
        """The profile whose stream alone is `generator` (an input's origin), or None (the
        mix's `kvmanager/5`, whose index draws the profile): what `--profile` a replay
        line needs. A profile's own stream in the mix is the same stream, so its inputs
        regenerate with `--profile` too."""
        return next((profile for profile, stream in self.alone_streams.items()
                     if stream.name == generator), None)

    def stream(self, seed: int, index: int) -> TraceGenerator:
        """The stream input `index` of `seed` comes from."""
        return self._picked(seeded_random(MIX, seed, index).random())

    def _picked(self, pick: float) -> TraceGenerator:
        return next((stream for stream, low, high in self.streams if low <= pick < high),
                    self.base)

    def generate(self, seed: int, index: int, num_ops: int | None = None):
        return self.stream(seed, index).generate(seed, index, num_ops)

    def from_bytes(self, data: bytes):
        """Fuzzer bytes: the first two pick the stream with the seeded draw's shares, the rest
        feed it. The pick is 1 - the draw, so bytes of zeros (what Hypothesis shrinks towards,
        and what bytes that ran out read) stay in `kvmanager/5`, the simplest traces."""
        pick = 1.0 - BytesRandom(data[:2]).random()
        return self._picked(pick).from_bytes(data[2:])


# Each profile's stream alone: the corner and scheduler profiles of `kvmanager/5` by streams
# of their own (`generator.ALONE`), every other profile by the stream that makes it in the mix
ALONE = {**generator.ALONE, "hybrid sizes": hybrid.GENERATOR, "chunked local": hybrid.LOCAL,
         "mamba": hybrid.MAMBA, "eagle window": hybrid.EAGLE, "cross attention": hybrid.CROSS,
         "mamba align": hybrid.MAMBA_ALIGN, "connector": connector.GENERATOR,
         "deferred frees": deferred.GENERATOR, "dcp": dcp.GENERATOR,
         "extra keys": extra_keys.GENERATOR, "lookahead hashes": lookahead_hashes.GENERATOR,
         "eagle groups": eagle_groups.GENERATOR, "mtp": mtp.GENERATOR,
         "prompt embeds": prompt_embeds.GENERATOR, "hisparse": hisparse.GENERATOR,
         "hisparse import": hisparse_import.GENERATOR, "lone window": lone_window.GENERATOR,
         "hisparse lag": hisparse_lag.GENERATOR,
         "two windows": two_windows.GENERATOR, "async outputs": async_outputs.GENERATOR}
# Profiles made alone only (`--profile NAME`), never drawn in the mix nor from fuzzer bytes
# (those that were until 2026-12-06 are in `STREAMS` above). A new profile may start here, the
# mix's draws kept, until it gets a share by `STREAMS`'s rule: "capped hits" (2026-12-07, the
# caller's max_cache_hit_length), "capped connector" and "capped mamba" (2026-12-07, the same at
# a KV connector's lookup, and beside a Mamba "align" group), "capped hisparse" (2026-12-07,
# beside HiSparse's groups), "mamba plain connector" (2026-12-08, a KV connector beside a Mamba
# group in mode "none" or "all")
ALONE_ONLY: dict[str, TraceGenerator] = {"capped hits": capped_hits.GENERATOR,
                                         "capped connector": capped_connector.GENERATOR,
                                         "capped mamba": capped_mamba.GENERATOR,
                                         "capped hisparse": capped_hisparse.GENERATOR,
                                         "mamba plain connector": mamba_plain.GENERATOR}
ALONE.update({"async connector": async_connector.GENERATOR,
              "async drafts": async_drafts.GENERATOR, "full last": full_last.GENERATOR,
              "streaming": streaming_input.GENERATOR,
              "async streaming": async_streaming.GENERATOR,
              "connector sizes": connector_sizes.GENERATOR,
              "hisparse cow": hisparse_cow.GENERATOR,
              "mamba connector": mamba_connector.GENERATOR,
              "streaming drafts": streaming_drafts.GENERATOR,
              "async streaming drafts": async_streaming_drafts.GENERATOR,
              "async pipeline": async_pipeline.GENERATOR,
              "connector cuts": connector_cuts.GENERATOR,
              "sync drafts": sync_drafts.GENERATOR})
ALONE.update(ALONE_ONLY)
GENERATOR = MixedStreams(generator.GENERATOR, STREAMS, ALONE)


def profiles() -> tuple[str, ...]:
    """Every profile a `kvmanager` trace comes from (its `note` is "profile NAME"): what the
    seeded run, the byte-fed twin and the Hypothesis strategy must each produce."""
    return ("scheduler", *generator.PROFILES, *hybrid.PROFILES, *connector.PROFILES,
            *deferred.PROFILES, *dcp.PROFILES, *extra_keys.PROFILES, *lookahead_hashes.PROFILES,
            *eagle_groups.PROFILES, *mtp.PROFILES, *prompt_embeds.PROFILES, *hisparse.PROFILES,
            *hisparse_import.PROFILES, *lone_window.PROFILES,
            *two_windows.PROFILES, *async_outputs.PROFILES,
            *hisparse_lag.PROFILES, *async_connector.PROFILES, *async_drafts.PROFILES,
            *full_last.PROFILES, *streaming_input.PROFILES, *async_streaming.PROFILES,
            *connector_sizes.PROFILES, *hisparse_cow.PROFILES, *mamba_connector.PROFILES,
            *streaming_drafts.PROFILES, *async_streaming_drafts.PROFILES,
            *async_pipeline.PROFILES, *connector_cuts.PROFILES, *sync_drafts.PROFILES,
            *ALONE_ONLY)
