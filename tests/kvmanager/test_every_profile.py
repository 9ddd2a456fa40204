"""Every `kvmanager` generator profile on its own seeded stream (`KVMANAGER.alone`, what
`kvfuzz diff kvmanager --profile NAME` runs) through the released vLLM 0.33.0 `KVCacheManager`,
each trace to its last op: indices 0 to BASE - 1 of each, then the top-ups that bring every
configuration issue 24 names to 500 traces in CI and 2,000 in a nightly run (`tests/bars.py`;
`ci_configs.py`: a profile is a mix of
configurations; each top-up runs the indices carrying the configurations it is for, in shards
that pytest -n spreads; a worker imports vLLM once, whatever the shards). Each shard's count of
traces per configuration is pinned and asserted here, and their sums in `test_ci_configs.py`.
Each profile's own stream, not the mix's, whose index draws the profile (the rarest is 1% of
it). The first shard of a profile also reaches the edge classes its traces exist for (`REACHES`).
Why not 2,000 of each profile: CI ran that once, 29 min 59 s of its 30 (`docs/upstream-vllm.md`,
"Speed"); 1,500 of most, 2,000 of some later, up to 2026-12-06, all ran clean in CI. The two
traces the check was wrong on (SETTLED) run on their own. Skips without vLLM."""

from __future__ import annotations

import gc
from collections import Counter
from dataclasses import replace

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager import (align_connector, align_eagle, align_events, align_external,
                                   align_external_eagle, align_recorded, align_reported,
                                   align_tail_drop, async_ops, connector, connector_cap, cut,
                                   hisparse_admission, hisparse_cap, hisparse_import,
                                   hisparse_cow, hisparse_lag, mamba_plain, streaming,
                                   sync_draft_ops)
from kvfuzz.fuzz.kvmanager.configs import MARKS
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.impl.kvmanager import RELEASED
from kvfuzz.oracle.kvmanager.model import MAMBA_SPECULATIVE
from tests.helpers import fail_with, needs_engine
from tests.kvmanager import ci_configs

pytestmark = needs_engine("vllm")  # and the slow tier
# Found past the shards with 1,500 of each profile from index 1000, the check's fault
# (boundary.py's `evicted_tail`): (profile, index)
SETTLED = (("mamba align", 2268), ("mamba align", 2306))
# (profile, first index, stop, configurations a trace must carry to run: () for all)
SHARDS = ci_configs.shards(KVMANAGER.profiles())
PINNED = ci_configs.load_pinned()

_LOCAL = "chunked-local hit: blocks before the chunk null"
_PASSES = "two windows: the hit search takes another pass"  # no full-attention group's
_CAPPED = "hit cut by the caller's cap"  # the "capped hits" profile's alone
_WINDOW = [mark for mark in MARKS if mark not in (_LOCAL, _PASSES, _CAPPED)]  # beside full
_HYBRID = [mark for mark in _WINDOW if not mark.startswith("EAGLE")]
_CONFIGS = lambda *names: [f"config: {name}" for name in names]  # noqa: E731
# What a profile's first BASE traces reach, each at least once: the hybrid coordinator's hits
# and caching cut to the scheduler block, a window's run passing a block off that grid, a dense
# window leaving blocks uncached, partial entries; chunked-local hits with null blocks before the
# chunk; Mamba states freed as a request moves on; with EAGLE beside a window, window hits
# dropping their last block and blocks cached past the scheduler grid for the lookup's peek;
# with a cross-attention group, preemptions and whole-request refusals counting the encoder's
# blocks; Mamba "align" mode's partial hits and copy-on-write; the connector's loads done and
# failed; frees deferred and released later.
REACHES = {
    "hybrid sizes": _HYBRID + ["window frees blocks"] + _CONFIGS(
        "groups of different block sizes", "hash block below the block size"),
    "chunked local": [_LOCAL, "window frees blocks"] + _CONFIGS("chunked local attention"),
    # (and multi-token prediction's share since 2026-12-08: speculative Mamba blocks deciding a
    # refusal, and reaching past max_model_len's)
    "mamba": ["window frees blocks", *MAMBA_SPECULATIVE, "admission padded with placeholder "
              "drafts"] + _CONFIGS("Mamba", "speculative Mamba blocks", "lookahead tokens"),
    "eagle window": _WINDOW + ["window frees blocks"] + _CONFIGS(
        "EAGLE", "sliding window", "groups of different block sizes",
        "hash block below the block size", "sparse retention"),
    "cross attention": ["preempt", "allocate_slots refused: the whole request does not fit"]
    + _CONFIGS("cross attention", "caching off", "whole request must fit"),
    "mamba align": ["admission with a hit", "partial hit: inside a block",
                    "copy-on-write copies taken", "preempt", "reset", "reset refused", "evict",
                    "allocate_slots refused", "allocate_slots of nothing refused",
                    "Mamba prefill checkpoint block",
                    "sparse retention: a chunk cut at the last cacheable block",
                    "sparse retention: a replay boundary's state written",
                    align_connector.LAGGING, align_connector.DEEPER,
                    align_eagle.HIT, align_eagle.MOVED, *align_events.OWN,
                    *align_reported.EVENTS]
    + _CONFIGS("Mamba align mode, prefix caching on (reduced checks)",
               "Mamba prefill checkpoint blocks", "speculative Mamba blocks", "EAGLE"),
    # full attention last: both groups of Mamba "align" (first) hitting as deep past 256 tokens
    "full last": [align_connector.AGREED_PAST_256, "preempt"] + _CONFIGS(
        "full attention's group last", "Mamba", "cross attention",
        "Mamba align mode, prefix caching on (reduced checks)"),
    # (a failed block's cuts: "connector cuts"')
    "connector": [event for event in connector.EVENTS if event != "connector admission refused"
                  and event not in connector.ASYNC_EVENTS + connector.SIZES_EVENTS +
                  (connector.SYNC_FAILED, connector.INSIDE_HIT,
                   connector.SYNC_CUT_TWO_IN_FLIGHT) + connector_cap.EVENTS +
                  mamba_plain.EVENTS]
    + _CONFIGS("KV connector", "blocks zeroed (mixed precision)", "sliding window",
               "chunked local attention"),
    # a connector over groups of different block sizes: external tokens ending inside the
    # larger group's block, loads of some groups only, failed loads freed, hits on the grid
    "connector sizes": list(connector.SIZES_EVENTS) + [
        "load done", "load failed, nothing valid (freed)", "resumed after its load",
        "external tokens: the whole prompt", "load refused with blocks reserved",
        "hit cut to the scheduler block size", "partial entry registered",
        "zeroing records compared"]
    + _CONFIGS("KV connector", "groups of different block sizes",
               "blocks zeroed (mixed precision)", "hash block below the block size"),
    # a connector's loads beside a Mamba "align" group: every outcome, partial local hits
    # dropped for the load, loads past a lagging Mamba state (synchronous loads: not here);
    # with EAGLE's drop (since 2026-12-07) lookups it moved, loads, reports and resumptions
    # (no spec-decode padding in the profile: its padded calls are the guard's, MAMBA_MTP_CONNECTOR)
    # hits reported beside its ops since 2026-12-07 (its first 100: the whole hits only, index 3;
    # inside a block, a connector's lookup reporting and the IndexError further on)
    # (the cap's truncated admission: "capped mamba"'s, `align_tail_drop.py`)
    "mamba connector": [event for event in align_external.EVENTS
                        if event != align_external.SYNC and event not in align_external.PADDED
                        and event not in align_tail_drop.EVENTS]
    + [align_connector.LAGGING, "boundary states offered", *align_external_eagle.OWN,
       *align_events.OWN, align_recorded.EXTERNAL_RECORDED, align_reported.REPORTED]
    + _CONFIGS("KV connector", "Mamba align mode, prefix caching on (reduced checks)", "EAGLE",
               "KV events", "stats"),
    "deferred frees": ["free deferred (pop_blocks_for_free)", "deferred free released",
                       "reset refused", "free deferred during its KV load",
                       "skipped blocks removed before request_finished"]
    + _CONFIGS("sliding window", "chunked local attention"),
    # HiSparse: host hits the device groups lost, write-backs done and pages published after;
    # speculative decoding's lookahead slots and EAGLE's drop (since 2026-12-08)
    "hisparse": ["admission with a hit", "host hit longer than the device groups' (retained)",
                 "write-backs reported done", "host pages published", "preempt", "evict",
                 "reset", "reset refused", "allocate_slots refused", "clean resident page unpinned",
                 *hisparse_admission.LOOKAHEAD_EVENTS, hisparse_cow.EAGLE_DROP]
    + _CONFIGS("HiSparse host source group (reduced checks)", "lookahead tokens", "EAGLE"),
    # HiSparse beside a second connector that imports external tokens into the host pool: every
    # import outcome, a resumption after one, and the write-backs and publications after them
    "hisparse import": list(hisparse_import.EVENTS) + [
        "write-backs reported done", "host pages published"]
    + _CONFIGS("HiSparse host source group (reduced checks)"),
    # HiSparse's worker reporting late: write-backs enqueued and not yet completed, completed
    # by some ranks and not all, out of order; finished requests' pages held, then published
    "hisparse lag": list(hisparse_lag.EVENTS) + [
        "write-backs reported done", "host pages published", "preempt"]
    + _CONFIGS("HiSparse host source group (reduced checks)"),
    # HiSparse's host copy-on-write beside a Mamba "align" group: partial local hits in the
    # source group, their copies made, released late, in flight at their request's free; the
    # worker's reads of the Mamba states judged (`align_reads`), prefill checkpoint blocks
    # taken, speculative blocks; lookahead slots' blocks, and an admission they decide
    "hisparse cow": list(hisparse_cow.EVENTS) + [
        "write-backs reported done", "host pages published", "preempt", "finish",
        "Mamba align: a step's state read by the worker",
        "Mamba align: a step's state copied to a new column", "Mamba prefill checkpoint block",
        *hisparse_admission.LOOKAHEAD_EVENTS]
    + _CONFIGS("HiSparse host source group (reduced checks)",
               "Mamba align mode, prefix caching on (reduced checks)",
               "hash block below the block size", "Mamba prefill checkpoint blocks",
               "speculative Mamba blocks", "lookahead tokens"),
    # a sliding window alone (the unitary coordinator): EAGLE's hits dropping the window's last
    # block, its sparse block mask, blocks freed as the window moves
    "lone window": ["EAGLE: a window hit drops its last block", "window frees blocks",
                    "admission with a hit", "window frees blocks with tokens in flight"]
    + _CONFIGS("sliding window alone (unitary coordinator)", "EAGLE", "sparse retention",
               "lookahead tokens", "extra retained tokens"),
    # two sliding windows (the hybrid coordinator without full attention): the hit search's
    # further passes, EAGLE's drops, both windows' frees
    "two windows": ["two windows: the hit search takes another pass",
                    "EAGLE: a window hit drops its last block", "window frees blocks",
                    "window hit: a block off the scheduler grid passed", "admission with a hit"]
    + _CONFIGS("two sliding windows (multi-pass hit search)", "EAGLE", "sparse retention",
               "groups of different block sizes", "hash block below the block size"),
    # vLLM's asynchronous scheduler's own ops (async_ops.ONE_TOKEN_EVENTS: output placeholders,
    # one into
    # a new block, processed outputs, stale output after a preemption), the window freeing
    # blocks with tokens in flight, prefix hits, preemptions
    "async outputs": list(async_ops.ONE_TOKEN_EVENTS) + [
        "window frees blocks with tokens in flight", "admission with a hit", "preempt",
        "allocate_slots refused"]
    + _CONFIGS("asynchronous scheduling", "sliding window", "extra retained tokens",
               "sparse retention", "whole request must fit"),
    # a KV connector under it: loads reported while other steps are in flight, resumptions,
    # failed loads, synchronous loads in flight, frees deferred and released, a one-token
    # prompt loaded whole and looked up again, a refused prefill chunk made again
    "async connector": list(connector.ASYNC_EVENTS) + [
        "load done", "load failed, a prefix valid", "load failed, nothing valid (freed)",
        "resumed after its load", "placeholder slot (token in flight)",
        "output processed, nothing in flight", "free deferred (pop_blocks_for_free)",
        "deferred free released", "load of some groups only", "preempt", connector.RELOOKUP,
        async_ops.CHUNK_AGAIN]
    + _CONFIGS("asynchronous scheduling", "KV connector", "blocks zeroed (mixed precision)"),
    # the same with draft tokens (async_ops.DRAFT_EVENTS: 1 + k placeholder slots, rejected
    # drafts rolled back, a decode after a step sat out, padded rows in flight), stale output
    # after a preemption, EAGLE's drop and MTP's held-back tokens
    "async drafts": list(async_ops.DRAFT_EVENTS) + [
        "stale token after a preemption", "output processed, nothing in flight",
        "window frees blocks with tokens in flight", "admission with a hit", "preempt",
        "EAGLE: a window hit drops its last block",
        "MTP: a block held back from caching, its tokens re-prefillable"]
    + _CONFIGS("asynchronous scheduling", "lookahead tokens", "lookahead hashing", "EAGLE",
               "multi-token prediction (prefill lookahead)", "sliding window"),
    # resumable (streaming-input) requests: stops that wait and updates taken at the stop or
    # after a wait (into a partial block too), resumptions with no lookup, beside prefix hits,
    # preemptions, whole-request refusals and a window's frees
    "streaming": list(streaming.EVENTS[:5]) + [
        "admission with a hit", "preempt", "window frees blocks",
        "allocate_slots refused: the whole request does not fit"]
    + _CONFIGS("sliding window", "whole request must fit", "watermark"),
    # the same under the asynchronous scheduler (streaming.ASYNC_EVENTS: stops discarding the
    # trace's last token, a waiting request's dropped step processed, a resumption before it
    # was, a stop by stale output), with updates at the stop and after a wait, placeholders,
    # stale tokens, preemptions and a window's frees with tokens in flight
    "async streaming": list(streaming.ASYNC_EVENTS) + [
        "streaming: stopped, waiting for an update", "streaming: update taken",
        "streaming: update taken at the stop", "resumed after a streaming update",
        "placeholder slot (token in flight)", "stale token after a preemption", "preempt",
        "window frees blocks with tokens in flight", "admission with a hit"]
    + _CONFIGS("asynchronous scheduling", "sliding window", "whole request must fit"),
    # the same under the V2 model runner over a pipeline of two stages (async_ops.
    # PIPELINE_EVENTS: two steps of a request in flight, the older processed first), with
    # placeholders, stale tokens, preemptions and a window's frees with tokens in flight
    "async pipeline": list(async_ops.PIPELINE_EVENTS) + [
        "placeholder slot (token in flight)", "stale token after a preemption", "preempt",
        "window frees blocks with tokens in flight", "admission with a hit"]
    + _CONFIGS("asynchronous scheduling", "sliding window", "whole request must fit"),
    # the synchronous sessions with draft tokens (streaming.SPEC_EVENTS: stops discarding the
    # token the caching after their output sampled, a hash kept over it under lookahead
    # hashing, made again at a lookup after a preemption), with updates at the stop and after
    # a wait (with images too), resumptions, padded admissions, EAGLE's drop and MTP's
    # held-back tokens
    "streaming drafts": list(streaming.SPEC_EVENTS) + [streaming.UPDATE_IMAGES,
        "streaming: stopped, waiting for an update", "streaming: update taken",
        "streaming: update taken at the stop", "resumed after a streaming update", "preempt",
        "admission with a hit", "admission padded with placeholder drafts",
        "EAGLE: a window hit drops its last block",
        "MTP: a block held back from caching, its tokens re-prefillable"]
    + _CONFIGS("lookahead tokens", "lookahead hashing", "EAGLE",
               "multi-token prediction (prefill lookahead)", "sliding window",
               "whole request must fit", "multimodal inputs"),
    # the asynchronous sessions with draft tokens: stops discarding the sampled token with a
    # step of 1 + k slots in flight, dropped steps processed while waiting or resumed before,
    # stops by stale output, beside the drafts' placeholders, rollbacks and padded rows in
    # flight (resumptions padded too), a hash kept over a discarded token, EAGLE's drop and
    # MTP's held-back tokens
    "async streaming drafts": list(streaming.ASYNC_EVENTS) + list(async_ops.DRAFT_EVENTS) + [
        streaming.HASH_KEPT, "streaming: stopped, waiting for an update",
        "streaming: update taken", "streaming: update taken at the stop",
        "resumed after a streaming update", "admission padded after its load",
        "stale token after a preemption", "preempt", "admission with a hit",
        "EAGLE: a window hit drops its last block",
        "MTP: a block held back from caching, its tokens re-prefillable"]
    + _CONFIGS("asynchronous scheduling", "lookahead tokens", "lookahead hashing", "EAGLE",
               "multi-token prediction (prefill lookahead)", "sliding window",
               "whole request must fit"),
    # a synchronous load failed at a block, the running requests its failed block cuts (to a
    # block's start, or back to their tokens before the step), beside asynchronous loads (some
    # failing at a block inside their local hit); under the asynchronous scheduler in a share
    # (cut.ASYNC_EVENTS: beneath a step in flight, the skipped step's placeholder left)
    "connector cuts": list(cut.EVENTS) + [connector.SYNC_FAILED, connector.INSIDE_HIT,
                                          connector.SYNC_CUT_IN_FLIGHT,
                                          connector.SYNC_CUT_TWO_IN_FLIGHT,
                                          "load failed, a prefix valid",
                                          "load done", "admission with a hit"]
    + _CONFIGS("KV connector", "whole request must fit", "asynchronous scheduling"),
    # the synchronous scheduler's draft steps (sync_draft_ops.EVENTS: the last token and k
    # drafts, slots past a block's end, fewer drafts at max_model_len), their rejected drafts
    # rolled back, padded admissions after a hit, preemptions with a chunk made again, EAGLE's
    # drop and MTP's held-back tokens
    "sync drafts": list(sync_draft_ops.EVENTS) + [
        "rejected drafts rolled back", "admission padded after a hit", "admission with a hit",
        "preempt", async_ops.CHUNK_AGAIN, "window frees blocks",
        "EAGLE: a window hit drops its last block",
        "MTP: a block held back from caching, its tokens re-prefillable"]
    + _CONFIGS("lookahead tokens", "lookahead hashing", "EAGLE",
               "multi-token prediction (prefill lookahead)", "sliding window"),
    # the caller's cap on lookups, one that cuts a hit, beside a window, groups of different
    # block sizes and EAGLE's margin
    "capped hits": ["lookup capped by the caller", _CAPPED, "admission with a hit",
                    "hit cut to the scheduler block size"]
    + _CONFIGS("sliding window", "groups of different block sizes", "EAGLE"),
    # the same at a KV connector's lookup, its external tokens kept or dropped by the cap
    # (`connector_cap.py`), over groups of different block sizes and asynchronous scheduling
    "capped connector": [connector_cap.CAPPED, connector_cap.DROPPED, connector_cap.KEPT, _CAPPED,
                         "connector admission with a hit",
                         "connector admission, asynchronous load", "load done"]
    + _CONFIGS("KV connector", "groups of different block sizes", "asynchronous scheduling"),
    # the same beside a Mamba "align" group: both lookups capped, answers the cap changed, a
    # connector's external tokens dropped by it (after a partial tail dropped for them: the
    # block-aligned hit admitted, `align_tail_drop.py`; index 65 first)
    "capped mamba": [connector_cap.ALIGN_CAPPED, connector_cap.ALIGN_CUT, connector_cap.CAPPED,
                     connector_cap.DROPPED, align_external.LOAD, align_tail_drop.TRUNCATED]
    + _CONFIGS("KV connector", "EAGLE", "Mamba align mode, prefix caching on (reduced checks)"),
    # the same beside HiSparse's groups: lookups capped and hits cut (the source's retained
    # host hit within the cap), an import's external tokens kept or dropped by it
    "capped hisparse": list(hisparse_cap.EVENTS) + [
        connector_cap.DROPPED, connector_cap.KEPT, "admission with a hit",
        "host hit longer than the device groups' (retained)", "host import admitted"]
    + _CONFIGS("HiSparse host source group (reduced checks)", "KV connector",
               "Mamba align mode, prefix caching on (reduced checks)"),
    # a connector beside a Mamba group in mode "none" or "all" (caching off): loads and
    # loads with the step, the states below the last one null, the last inside a block, loads
    # done and failed whole, resumed, some groups written, the finish's remove_skipped_blocks;
    # under the asynchronous scheduler loads reported beside steps in flight, frees deferred
    "mamba plain connector": list(mamba_plain.EVENTS) + [
        "load done", "load failed, nothing valid (freed)", "resumed after its load",
        "a whole prompt loaded: its last token recomputed", "load of some groups only",
        "one-token prompt loaded whole, looked up again", "connector admission refused",
        "load refused with blocks reserved", "zeroing records compared",
        "skipped blocks removed before request_finished", "window frees blocks",
        # (under the asynchronous scheduler, three traces in ten)
        "load reported with other requests' steps in flight",
        "synchronous load, its step in flight", "free deferred (pop_blocks_for_free)",
        "deferred free released", "window frees blocks with tokens in flight",
        # (multi-token prediction's share since 2026-12-08)
        MAMBA_SPECULATIVE[0], "admission padded under a connector"]
    + _CONFIGS("KV connector", "Mamba", "caching off", "asynchronous scheduling",
               "speculative Mamba blocks"),
}


_FROZEN: list[str] = []  # the release whose imports this process froze (once)


def _released():
    """The released class; the first time in a process, loaded and what loading it imported
    (torch and vLLM, some 600,000 objects) frozen out of the cyclic collector's walks
    (`gc.freeze`, as kvfuzz's workers do: `fuzz/engine/isolation.py`): a full collection walked
    them all, about half a second once every few hundred traces (docs/upstream-vllm.md,
    "Speed")."""
    release = KVMANAGER.catalogue.resolve(RELEASED)
    if not _FROZEN:
        release.load()
        gc.collect()
        gc.freeze()
        _FROZEN.append(release.name)
    return release


def test_every_profile_an_edge_class_table_names_is_a_profile():
    assert set(REACHES) <= set(KVMANAGER.profiles()), set(REACHES) - set(KVMANAGER.profiles())


@pytest.mark.parametrize("profile, first, stop, rules", SHARDS,
                         ids=[ci_configs.shard_key(*shard).replace(" ", "_") for shard in SHARDS])
def test_each_profiles_seeded_traces_run_to_their_last_op_on_vllm(profile, first, stop, rules):
    release = _released()
    assert release.name == "vllm.kvmanager"
    stream, events = KVMANAGER.alone(profile).generator, Counter()
    for index in range(first, stop):
        trace = stream.generate(0, index)
        assert trace.note == f"profile {profile}"
        if not ci_configs.runs(trace, index, rules):
            continue  # a top-up runs the traces carrying its configurations only
        outcome = KVMANAGER.check(trace, release)
        if outcome.status != AGREE:
            assert outcome.divergence is not None, (index, outcome.outside)
            fail_with(outcome.divergence)
        events.update(outcome.features)
    wanted = REACHES.get(profile, []) if first == 0 else []
    assert all(events[name] for name in wanted), {name: events[name] for name in wanted}
    # the configurations the run reported, as pinned (their sums: test_ci_configs.py)
    ran = {name.removeprefix("config: "): count for name, count in sorted(events.items())
           if name.startswith("config: ")}
    assert ran == PINNED.get(ci_configs.shard_key(profile, first, stop, rules)), (
        "this shard's traces changed: "
        "python -m tests.kvmanager.ci_configs rewrites ci_configs.json")


@pytest.mark.parametrize("profile, index", SETTLED)
def test_the_traces_the_check_was_wrong_on_run_to_their_last_op(profile, index):
    """Found past the indices above, with 1,500 of each profile from index 1000
    (docs/upstream-vllm.md, "Speed"): the release offered the copy of a partial tail whose
    entry `evict_blocks` had dropped. (As found: without the lookahead hashes the "mamba
    align" profile draws after every other draw since 2026-12-06, which 2268 now carries, and
    without EAGLE's drop, drawn after those since 2026-12-06, which 2306 now carries, and
    without the shared-prefix checkpoint drawn after it, which 2306 carries too.)"""
    release = _released()
    trace = replace(KVMANAGER.alone(profile).generator.generate(0, index), hash_lookahead=0,
                    prefill_lookahead=0, eagle=False, mamba_shared_prefix=False)
    outcome = KVMANAGER.check(trace, release)
    if outcome.status != AGREE:
        fail_with(outcome.divergence)
