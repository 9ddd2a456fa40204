"""The KV-cache-manager trace: a scheduler's calls on vLLM's `KVCacheManager` (vllm 0.33.0) over
request lifecycles, and its version-stable JSON form ("kvfuzz-kvmanager-trace/1"). Standard
library only.

The manager has one full-attention KV-cache group, or (with `window` > 0) a full-attention group
and a sliding-window group of that window, all of `block_size` tokens per block, over one pool of
`blocks` blocks (block 0 is the null block). Ops name requests by id (`rid`) and resolve at run
time against the requests' states, as a scheduler's choices would: an op that does not apply to
the request's state (or to no live request) resolves to nothing, so a trace stays valid when a
shrinker drops ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import (LATER, Origin, dataclass_op_to_json, document_id,
                                      provenance)
from kvfuzz.strategies.kvmanager import connector_ops, stream_ops
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Cut, Loaded
from kvfuzz.strategies.kvmanager.free_trace_ops import Finish, Preempt, Release, RemoveSkipped
from kvfuzz.strategies.kvmanager.output_ops import Placeholder, Processed, Sample, Settle
from kvfuzz.strategies.kvmanager.request_keys import NO_KEYS, RequestKeys  # (re-exported)
from kvfuzz.strategies.kvmanager.stream_ops import Stream

FORMAT = "kvfuzz-kvmanager-trace/1"


@dataclass(frozen=True)
class Arrive:
    """A new request with prompt `tokens` (waiting; nothing is called); `no_cache_read`: it
    skips reading the prefix cache (vLLM's `skip_reading_prefix_cache`, e.g. prompt logprobs):
    its lookups hit nothing. `lora`, `lora_path`, `salt`, `images`: its extra hash keys
    (`RequestKeys`; the "extra keys" profile). `embeds`: the prompt comes as embeddings
    (`prompt_embeds`, one float32 value a position: `tokens`), its token ids zeros (the
    "prompt embeds" profile)."""

    rid: int
    tokens: tuple[int, ...]
    no_cache_read: bool = field(default=False, metadata=LATER)
    lora: str = field(default="", metadata=LATER)
    lora_path: str = field(default="", metadata=LATER)
    salt: str = field(default="", metadata=LATER)
    images: tuple[tuple[str, int, int], ...] = field(default=(), metadata=LATER)
    embeds: bool = field(default=False, metadata=LATER)

    @property
    def keys(self) -> RequestKeys:
        return RequestKeys(self.lora, self.lora_path, self.salt, self.images,
                           self.tokens if self.embeds else ())

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The prompt's token ids as vLLM's request holds them: zeros for a prompt given as
        embeddings (`embeds`: `tokens` are then each position's embedding value)."""
        return (0,) * len(self.tokens) if self.embeds else self.tokens


@dataclass(frozen=True)
class Schedule:
    """The scheduler gives request `rid` up to `chunk` tokens this step. Waiting: admission,
    `get_computed_blocks` then `allocate_slots` with the hit, the chunk capped at the tokens the
    hit leaves; running with prompt (or a refused decode) left: `allocate_slots` of the next
    chunk. Success moves `num_computed_tokens` on; None leaves the request where it was. A
    chunk of 0 is a step with no slots of its own: an admission adopting its hit alone (as a
    chunk ending inside a replayed prefix does), else a caller's bug the manager refuses
    (ValueError).

    `pad`: vLLM's spec-decode padding (`pad_spec_decode` in `Scheduler.schedule`): an admission
    whose hit leaves one token is given `1 + pad` new tokens, the token and `pad` placeholder
    draft rows past the request's tokens (so the step keeps the CUDA graph's decode shape);
    where the hit leaves more, the chunk is short of `1 + pad`, or the rows and the sampled
    token pass `max_model_len`, the admission is as without it. The placeholders are rejected
    drafts when the step's output is processed (`update_from_output` rolls
    `num_computed_tokens` back by them): the request then has its tokens computed.

    `rows_in_flight` (asynchronous scheduling, as vLLM's `AsyncScheduler` has it): the rows
    stay counted computed and in flight past the request's tokens until the step's output,
    whose `settle` rolls them back (`rejected`); without it the lock step counts them neither
    (the rollback taken at once: kvfuzz's own traces).

    `again`: a running request's prefill chunk made again after the pool refused it and the
    scheduler preempted (its running loop retries the same `allocate_slots`): resolves to
    nothing unless the request's last allocation was refused (where a generator's estimate
    was wrong and the first succeeded, the chunk has its slots).

    `drafts` (speculative decoding under the synchronous scheduler, vLLM's `Scheduler` with
    `spec_token_ids`): a running request whose only uncomputed token is its last sampled one
    is scheduled it and up to that many draft tokens after it, `allocate_slots(request, 1 +
    drafts)` (at most `chunk`, and room left for the token sampled after them within
    `max_model_len`, as the scheduler caps `num_new_tokens`). The request then counts the
    drafts computed past its tokens until its output: the accepted ones and the bonus token
    are `sample`s, the rejected ones rolled back by the `settle` (`rejected`) before it caches.
    Nothing in flight: the allocation's output is processed before the next step. Ignored
    under asynchronous scheduling (whose drafts are `placeholder`'s) and where more than the
    last token is uncomputed (a prefill chunk). vLLM also drops the drafts of a request whose
    last step was a non-final chunk (`update_draft_token_ids`), which the trace does not tell
    from one that sampled its last token: kvfuzz's generator and guard write none there.

    `max_hit` (an admission's): the `max_cache_hit_length` the scheduler passes to
    `get_computed_blocks` (vLLM 0.33.0, `Scheduler.schedule` 1117-1127), the auxiliary-output
    connector's `max_cache_hit`: its blocks cached there and on the GPU times the block size,
    at most `num_tokens - 1` (`aux_output_connector/connector.py` 138-146). The lock step passes
    `min(max_hit, num_tokens - 1)`; -1: none passed (the manager's own `num_tokens - 1`, every
    engine without auxiliary outputs). Ignored where the schedule is no admission."""

    rid: int
    chunk: int
    pad: int = field(default=0, metadata=LATER)
    rows_in_flight: bool = field(default=False, metadata=LATER)
    again: bool = field(default=False, metadata=LATER)
    drafts: int = field(default=0, metadata=LATER)
    max_hit: int = field(default=-1, metadata=LATER)


@dataclass(frozen=True)
class Decode:
    """A running request whose tokens are all computed samples `token`
    (`append_output_token_ids`) and gets a slot for it (`allocate_slots(request, 1)`). Resolves
    to nothing at `max_model_len` tokens: a request ends there."""

    rid: int
    token: int


@dataclass(frozen=True)
class Evict:
    """`evict_blocks(set(block_ids))`: ids outside the pool are dropped at run time."""

    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class Reset:
    """`reset_prefix_cache()`: refused (False) while any block is held."""


Op = Arrive | Schedule | Decode | Sample | Preempt | Finish | Release | RemoveSkipped | Evict | \
    Reset | Connect | Loaded | Cut | Settle | Placeholder | Processed | Stream
KINDS = {"arrive": Arrive, "schedule": Schedule, "decode": Decode, "sample": Sample,
         "preempt": Preempt, "finish": Finish, "release": Release,
         "remove_skipped": RemoveSkipped, "evict": Evict,
         "reset": Reset, "settle": Settle, "placeholder": Placeholder, "processed": Processed,
         **connector_ops.OPS, **stream_ops.OPS}
NAMES = {cls: name for name, cls in KINDS.items()}


@dataclass(frozen=True)
class Trace:
    """`KVCacheManager` over `blocks` blocks, `block_size` tokens each, one full-attention group
    and, when `window` > 0, a sliding-window group; requests end at `max_model_len` tokens.

    The engine's settings that change what the manager does: `retention` (the KV-cache config's
    `prefix_cache_retention_interval`: None caches every full sliding-window block, 0 only the
    blocks a replay of the prompt can hit, the engine's default; a multiple of the block size
    one window's worth per segment of that many tokens), `full_sequence_must_fit` (the
    scheduler's `scheduler_reserve_full_isl`, on by default in the engine: an admission first
    checks that the whole request fits), `max_in_flight_tokens` (None: the manager's default,
    max_model_len; it caps what that check counts for the sliding-window group) and `watermark`
    (the scheduler's: the fraction of the blocks an admission leaves free while other requests
    run; 0, the default, none).

    And the configurations beyond the simplest one: `caching` (prefix caching, on by default),
    `events` (KV events, taken and compared after every op; `report`: requests ask hits to be
    reported, kv_cache_report_mode "full"), `stats` (log_stats: prefix-cache stats recorded at
    each admission, made after every op), `lookahead` (speculative decoding: slots for that many
    draft tokens on every allocation), `eagle` (use_eagle: a hit drops its last block; beside a
    sliding window each group looks a block further first), `async_scheduling` (a running
    request's previous allocation is still in flight at its next: `num_in_flight_tokens`;
    `steps_in_flight` n > 1, a pipeline's: its last n allocations, oldest processed first),
    `retained` (the sliding window's `extra_retained_tokens`).

    Groups of different block sizes (`kvmanager/hybrid/1`): `window_block_size`, the
    sliding-window group's block size where it differs from `block_size` (the full-attention
    group's; 0: the same), or since 2026-12-08 a Mamba group's in mode "none" or "all" (vLLM's
    config makes it the model's length with caching off: `strategies/kvmanager/mamba_block.py`;
    up to `MAX_LEN` there), and `hash_block_size`, the tokens per block hash where they are fewer
    than every group's block size (0: `block_size`). The manager then schedules in blocks of
    `scheduler_block_size` (the least common multiple of the groups' block sizes): hits are
    aligned to it, and so is what a step caches.

    Chunked-local attention (`kvmanager/5[chunked local]`): `local_chunk` > 0 makes the second
    group a `ChunkedLocalAttentionSpec` of that `attention_chunk_size` (no sliding window then):
    a token attends to the tokens of its own chunk only.

    Mamba (`kvmanager/5[mamba]`): `mamba_mode` "none" or "all" makes the second group a
    `MambaSpec` of that `mamba_cache_mode`, with prefix caching off (vLLM refuses either mode with
    caching on): a request keeps only the state of its last computed token. "align"
    (`kvmanager/5[mamba align]`), with prefix caching, is judged in a reduced mode
    (`fuzz/kvmanager/align.py`): the oracle does not model its checkpoints.
    `mamba_checkpoint` > 0 gives that group one prefill checkpoint block
    (`MambaSpec.num_prefill_checkpoint_blocks=1`, `prefill_checkpoint_alignment` this many
    tokens): a chunk that reaches past a valid checkpoint holds its state in one more block.
    `mamba_speculative` > 0 is that group's `num_speculative_blocks` (multi-token prediction's
    draft tokens; the profile passes as many lookahead slots): its table holds that many scratch
    blocks past the state of the last computed token. In mode "none" or "all" (the "mamba"
    profile's MTP share, since 2026-12-08) the group counts and takes `block_size *
    mamba_speculative` tokens more than the others on every allocation, past the draft slots.

    Cross-attention (`kvmanager/5[cross attention]`): `encoder_tokens` > 0 makes the second group
    a `CrossAttentionSpec` (an encoder-decoder model's, Whisper's), with prefix caching off
    (vLLM's cross-attention manager refuses lookups): every request has that many encoder
    tokens, whose blocks it gets at each admission (`num_encoder_tokens`, as the scheduler passes
    it while the request has computed nothing) and keeps until it is freed.

    KV connectors (`kvmanager/5[connector]`): `connect` and `loaded` ops (`connector_ops.py`);
    `zeroing` gives the second group (a sliding window or chunked-local one) another precision
    than full attention's, which makes vLLM record every new attention block for zeroing
    (`KVCacheConfig.needs_kv_cache_zeroing`, mixed precision), read back every op
    (`take_new_block_ids`). Beside a Mamba group vLLM records them whatever the precision (its
    layers turn zeroing on; the Mamba group's own blocks are never recorded): there `zeroing`
    asks only that the records be read back and compared ("mamba plain connector").

    Decode context parallelism (`kvmanager/5[dcp]`, `strategies/kvmanager/dcp.py`): `dcp` > 1
    shards each block's KV over that many ranks: the one full-attention group's spec has blocks
    of `block_size // dcp` tokens, and the manager (`dcp_world_size`) schedules, hashes and
    allocates in blocks of `block_size`, the manager's view the oracle models.

    Lookahead hashing (`kvmanager/5[lookahead hashes]`): `hash_lookahead` > 0 is the engine's
    `num_hash_lookahead_tokens` (EAGLE's drafter reads that many tokens past a block, so a
    block's hash covers them: it exists only once they do, and equal blocks followed by other
    tokens differ), passed to the manager and to vLLM's request block hasher; the scheduler then
    clears `use_eagle` (no block dropped), so `eagle` is false.

    EAGLE groups flagged apart (`kvmanager/5[eagle groups]`): `eagle_groups` lists the groups
    (0 full attention, 1 the sliding window) whose `KVCacheGroupSpec` has `is_eagle_group`
    (a draft model's layers): with `eagle` only they take EAGLE's drop, where with none
    flagged every group does.

    Multi-token prediction (`kvmanager/5[mtp]`): `prefill_lookahead` is the engine's
    `num_prefill_lookahead` (MTP's `num_speculative_tokens`: the drafter reads that many prompt
    tokens past a chunk), so the last `prefill_lookahead - 1` computed tokens may be re-prefilled
    and are held back from caching (the unitary coordinator's every group, the hybrid one's
    groups that take EAGLE's drop).

    HiSparse (`kvmanager/5[hisparse]`, `strategies/kvmanager/hisparse.py`): `hisparse` > 0 is
    the host pool's blocks (`KVCacheConfig.hisparse_host_num_blocks`), and the groups are
    HiSparse's: its source group (full attention, host-resident, role `HISPARSE_SOURCE`: a pool
    of its own on the host, hashes published once their pages are written back, hits kept that
    the device groups lost), the indexer (full attention on the device), the resident pages
    and the hot region, all in blocks of `block_size`; judged in a reduced mode
    (`fuzz/kvmanager/hisparse.py`), the write-backs completed by the judge as HiSparse's
    worker reports them. `hisparse_lag` (`kvmanager/5[hisparse lag]`,
    `strategies/kvmanager/hisparse_lag.py`), (most ops late, ranks, seed) or empty: the worker's
    reports come late, out of order and in parts, drawn per transfer from the seed. Beside
    HiSparse's groups `lookahead` (the draft tokens' slots, in every attention group) and, the
    four groups alone, `eagle` are modelled since 2026-12-08.

    A lone sliding window (`kvmanager/5[lone window]`): `lone` drops the full-attention group,
    the sliding window of `window` tokens in blocks of `block_size` is the model's one group
    (group 0: a model whose every layer is sliding window, as Mistral-7B-v0.1's), under vLLM's
    unitary coordinator.

    Two sliding windows (`kvmanager/5[two windows]`): `first_window` makes group 0 a sliding
    window of that many tokens (in blocks of `block_size`) in place of full attention, beside
    the window of `window` tokens (a model whose layers are all sliding window, in two window
    sizes), under vLLM's hybrid coordinator, whose hit search then takes more than one pass.

    Full attention ordered last (`kvmanager/5[full last]`): `full_last` puts the second group
    (Mamba in mode "none" or "all", or cross attention, caching off; or Mamba "align") first in
    the manager's `kv_cache_groups` and full attention after it, as vLLM groups the layers of a
    model whose first layer is not full attention (Qwen3-Next's and Jamba's Mamba layers, Gemma
    3's sliding windows: `kv_cache_planning.py` groups layers in the order the model registers
    them). A trace still names its groups full attention first: the driver reads the manager's
    answers per group back into that order, the oracle allocates and frees in the manager's,
    and the reduced mode of "align" reads the pool's group ids in the trace's
    (`fuzz/kvmanager/align_order.py`)."""

    blocks: int
    block_size: int
    window: int
    max_model_len: int
    ops: tuple[Op, ...]
    retention: int | None = None
    full_sequence_must_fit: bool = False
    max_in_flight_tokens: int | None = None
    watermark: float = 0.0
    caching: bool = True
    events: bool = False
    report: bool = False
    stats: bool = False
    lookahead: int = 0
    eagle: bool = False
    async_scheduling: bool = False
    retained: int = 0
    window_block_size: int = 0
    hash_block_size: int = 0
    local_chunk: int = 0
    mamba_mode: str = ""
    encoder_tokens: int = 0
    zeroing: bool = False
    dcp: int = 0
    hash_lookahead: int = 0
    eagle_groups: tuple[int, ...] = ()
    prefill_lookahead: int = 0
    mamba_checkpoint: int = 0
    mamba_speculative: int = 0
    hisparse: int = 0
    hisparse_lag: tuple[int, ...] = ()
    lone: bool = False
    first_window: int = 0
    full_last: bool = False
    steps_in_flight: int = 1
    mamba_shared_prefix: bool = False
    origin: Origin | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Each group's block size: full attention's, then the sliding window's (a lone window's
        alone)."""
        if self.lone:
            return (self.block_size,)
        return (self.block_size, self.window_block_size or self.block_size)[
            :2 if self.window or self.local_chunk or self.mamba_mode or self.encoder_tokens
            else 1]

    @property
    def hash_size(self) -> int:
        return self.hash_block_size or self.block_size

    @property
    def scheduler_block_size(self) -> int:
        return math.lcm(*self.sizes)

    def trace_id(self) -> str:
        return document_id(to_json(self))

    def describe(self) -> str:
        groups = f"sliding window {self.window} alone" if self.lone else \
            f"sliding windows {self.first_window} and {self.window}" if self.first_window else \
            f"HiSparse (source on {self.hisparse} host blocks, indexer, resident, hot)" \
            if self.hisparse else f"full + sliding window {self.window}" if self.window else \
            f"full + chunked local {self.local_chunk}" if self.local_chunk else \
            f"full + Mamba ({self.mamba_mode})" if self.mamba_mode else \
            f"full + cross attention ({self.encoder_tokens} encoder tokens)" \
            if self.encoder_tokens else "full attention"
        groups += ", full attention's group last" if self.full_last else ""
        if self.window_block_size and self.window_block_size != self.block_size:
            groups += f" in blocks of {self.window_block_size}"
        if self.hash_block_size and self.hash_block_size != self.block_size:
            groups += f", hashed per {self.hash_block_size} tokens"
        settings = [f"retention {self.retention}"] if self.retention is not None else []
        settings += ["full sequence must fit"] if self.full_sequence_must_fit else []
        settings += [f"max_in_flight_tokens {self.max_in_flight_tokens}"] \
            if self.max_in_flight_tokens is not None else []
        settings += [f"watermark {self.watermark}"] if self.watermark else []
        settings += [name for name, on in (
            ("caching off", not self.caching), ("KV events", self.events),
            ("hits reported", self.report), ("stats", self.stats),
            (f"{self.lookahead} lookahead tokens", self.lookahead), ("EAGLE", self.eagle),
            ("asynchronous scheduling", self.async_scheduling),
            (f"{self.steps_in_flight} steps in flight", self.steps_in_flight > 1),
            (f"{self.retained} extra retained tokens", self.retained),
            ("blocks zeroed (mixed precision)", self.zeroing and not self.mamba_mode),
            ("blocks zeroed (Mamba layers)", self.zeroing and self.mamba_mode),
            (f"decode context parallel over {self.dcp} ranks", self.dcp),
            (f"hashes cover {self.hash_lookahead} lookahead tokens", self.hash_lookahead),
            (f"EAGLE groups flagged: {list(self.eagle_groups)}", self.eagle_groups),
            (f"MTP: {self.prefill_lookahead} prefill lookahead tokens", self.prefill_lookahead),
            (f"Mamba prefill checkpoints aligned to {self.mamba_checkpoint} tokens",
             self.mamba_checkpoint),
            (f"{self.mamba_speculative} speculative Mamba blocks", self.mamba_speculative),
            ("Mamba shared-prefix checkpoint", self.mamba_shared_prefix),
            ("write-backs reported up to {} ops late by {} ranks (seed {})".format(
                *self.hisparse_lag) if self.hisparse_lag else "", self.hisparse_lag))
            if on]
        return (f"{self.blocks} blocks of {self.block_size} tokens (null block 0), {groups}, "
                f"max_model_len {self.max_model_len}, {', '.join(settings + [''])}"
                f"{len(self.ops)} ops")


def to_json(trace: Trace) -> dict:
    return {"format": FORMAT, "blocks": trace.blocks, "block_size": trace.block_size,
            "window": trace.window, "max_model_len": trace.max_model_len,
            **_settings(trace),
            "ops": [dataclass_op_to_json(op, NAMES[type(op)]) for op in trace.ops],
            **provenance(trace)}


def _settings(trace: Trace) -> dict:
    """The optional settings, written only when they differ from their defaults (so a file
    without them reads as before)."""
    data = {"retention": trace.retention} if trace.retention is not None else {}
    data |= {"full_sequence_must_fit": True} if trace.full_sequence_must_fit else {}
    if trace.max_in_flight_tokens is not None:
        data["max_in_flight_tokens"] = trace.max_in_flight_tokens
    data |= {"watermark": trace.watermark} if trace.watermark else {}
    return data | {name: list(value) if isinstance(value, tuple) else value
                   for name, default in LATER_SETTINGS.items()
                   if (value := getattr(trace, name)) != default}


# Settings added with `kvmanager/5` (and the hybrid stream's two sizes), and their defaults (a
# file without them reads as before).
LATER_SETTINGS = {"caching": True, "events": False, "report": False, "stats": False,
                  "lookahead": 0, "eagle": False, "async_scheduling": False, "retained": 0,
                  "window_block_size": 0, "hash_block_size": 0, "local_chunk": 0,
                  "mamba_mode": "", "encoder_tokens": 0, "zeroing": False, "dcp": 0,
                  "hash_lookahead": 0, "eagle_groups": (), "prefill_lookahead": 0,
                  "mamba_checkpoint": 0, "mamba_speculative": 0, "hisparse": 0, "lone": False,
                  "hisparse_lag": (),
                  "first_window": 0, "full_last": False, "steps_in_flight": 1,
                  "mamba_shared_prefix": False}
