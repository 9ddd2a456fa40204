"""The seeded sessions' settings (`Workload`), what a session did (`SessionResult`), and the
named workloads the tests and corpus/ run (`vllm_scheduler.run_session` runs them). No vLLM."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Workload:
    """The session's engine settings and requests: `groups` prefixes shared by
    `per_group` requests each, plus `loners` requests with none; prompts of up to
    `max_prompt` tokens; `max_tokens` sampled at most; arrivals over the first steps."""

    blocks: int = 40
    block_size: int = 16
    max_batched_tokens: int = 64
    max_seqs: int = 8
    max_model_len: int = 1024
    groups: int = 2
    per_group: int = 4
    loners: int = 2
    max_prompt: int = 180
    max_tokens: int = 40
    max_steps: int = 5000
    offload_bytes: int = 0  # CPU bytes of vLLM's CPU offloading connector (0: no connector)
    fake_connector: bool = False  # kvfuzz's seeded fake KV connector (fake_connector.py)
    abort_loads: float = 0.0  # with it: each step, the chance a load in flight is aborted
    sync_load_failures: bool = False  # with it: three synchronous loads in ten fail at a block
    # The fake connector requires KV delivery (`requires_kv_delivery`: a preemption drops its
    # stale output), and is a KV producer only (vLLM then does not defer block frees)
    kv_delivery: bool = False
    kv_producer: bool = False
    # The scheduler's frees deferred past a step in flight (`defer_block_free`, as vLLM sets it
    # with overlapping batches and a consumer connector), and the chance a step has one of the
    # requests it scheduled aborted before its output comes (which defers that request's free)
    deferred_aborts: float = 0.0
    # A second KV-cache group: a sliding window of `window` tokens (0: full attention alone),
    # in bfloat16 beside full attention's float16 with `zeroing` (mixed precision: vLLM then
    # records every new attention block for the worker to zero, `needs_kv_cache_zeroing`)
    window: int = 0
    zeroing: bool = False
    # The share of requests with a cache salt, and of those with a LoRA adapter (of two, the
    # engine's LoRA config unset: the scheduler then schedules them as any other), drawn from
    # a stream of their own (the prompts stay the session's)
    salts: float = 0.0
    loras: float = 0.0
    # Speculative decoding (vllm_speculative.py): "eagle" or "mtp" with `num_speculative` draft
    # tokens, lookahead block hashes (vLLM's default) or, without, EAGLE's last-block drop; the
    # groups flagged `is_eagle_group`; the share of prompts given as embeddings
    speculative: str = ""
    num_speculative: int = 0
    lookahead_hashes: bool = True
    # MTP's draft modules (0: one a draft token, multi-module), and EAGLE's last-block drop where
    # hashes do not look ahead (False: vLLM's experimental `disable_eagle_block_drop`)
    mtp_modules: int = 0
    eagle_drop: bool = True
    # Mamba's shared-prefix checkpoint (`CacheConfig.enable_mamba_shared_prefix_checkpoint`,
    # `align_shared_prefix.py`): on only with EAGLE's drop and a hash block below the block
    mamba_shared_prefix: bool = False
    eagle_groups: tuple = ()
    embeds: float = 0.0
    # vLLM's AsyncScheduler (scheduler_config.async_scheduling): step N+1 scheduled before step
    # N's output is processed, as the engine's batch queue of two does (vllm_async.py)
    async_scheduling: bool = False
    # vLLM's V2 model runner (the engine's default on a GPU where it supports the model,
    # `VllmConfig.use_v2_model_runner`; this CPU answers V1), and under it a pipeline of
    # `pipeline_stages`: the scheduler then holds a request's next decode that many steps
    # (`decode_stagger`) and the engine's batch queue is one more (vllm_async.py)
    v2_runner: bool = False
    pipeline_stages: int = 1
    # Streaming input (vllm_streaming.py): the share of requests that are resumable, each fed 1
    # to `max_updates` streaming updates, then its end (synchronous scheduling only)
    streaming: float = 0.0
    max_updates: int = 3
    # Structured output (fake_grammar.py): the share of requests with a grammar of kvfuzz's
    # fake backend (compiled after 0-3 steps, or failing to; rejecting sampled tokens and
    # filtering drafts with seeded chances); with speculation, the synchronous sessions' fake
    # drafter then proposes `num_speculative` drafts a step (filtered by the grammars)
    structured: float = 0.0
    # With speculation under the synchronous scheduler: the fake drafter (fake_grammar.py)
    # proposes `num_speculative` drafts a step without structured output too (the engine's
    # post_step), some accepted at each output (the asynchronous sessions draft anyway)
    drafts: bool = False
    # A Mamba group beside full attention (guard_mamba.py): `mamba` its cache mode ("align": the
    # one with prefix caching), of the full-attention group's block size; `mamba_checkpoint`
    # > 0 gives it prefill checkpoint blocks aligned to that many tokens (0: none),
    # `mamba_checkpoint_blocks` of them (every released model sets 1; vLLM's manager and
    # scheduler read any positive count as "has checkpoint blocks", so more run as one)
    mamba: str = ""
    mamba_checkpoint: int = 0
    mamba_checkpoint_blocks: int = 1
    # the cache config's `prefix_match_unit` (0: unset): tokens per block hash below the block
    # size, which beside a Mamba "align" group turns vLLM's partial hits on
    hash_block_size: int = 0
    # Auxiliary outputs (vLLM's routed experts, `aux_output_config.enable_return_routed_experts`,
    # vllm_aux.py): the scheduler then caps each admission's lookup
    # (`AuxOutputSchedulerConnector.max_cache_hit`); the model a mixture of experts, as vLLM asks
    aux_outputs: bool = False


@dataclass
class SessionResult:
    steps: int
    finished: int
    requests: int
    preemptions: int
    manager: object                     # what the scheduler called: the wrapper, or its own
    scheduled_tokens: int = 0
    lookups_with_a_hit: int = 0
    pool: object = None                 # the wrapped pool, when one was
    loads: int = 0                      # the offloading connector's transfer jobs, if any
    stores: int = 0
    aborted: int = 0                    # the fake connector's requests aborted during a load
    deferred: int = 0                   # requests aborted during their step (deferred frees)
    sync_failures: int = 0              # and its synchronous loads failed
    streaming: object = None            # the streaming inputs sent (vllm_streaming.py), if any
    grammars: object = None             # the fake grammar backend's counts (fake_grammar.py)
    notes: list[str] = field(default_factory=list)


# The fake connector's sessions in tests and corpus/: a pool tight enough that loads wait on
# the blocks reserved for the prefills in flight.
FAKE_CONNECTOR = Workload(fake_connector=True, blocks=24)
# Zeroing: full attention and a 48-token window in two precisions (each request holds blocks
# in both groups: 60 blocks, so that sessions still preempt, not all the time)
ZEROING = Workload(window=48, zeroing=True, blocks=60)
# Zeroing with the fake connector over both groups: loads that write some groups only
ZEROING_CONNECTOR = Workload(window=48, zeroing=True, blocks=48, fake_connector=True)
# Extra hash keys: requests that share prefixes, half of them salted, a third with a LoRA
# adapter, so equal prompts differ in their keys alone
EXTRA_KEYS = Workload(salts=0.5, loras=0.35)
# Speculative decoding (vllm_speculative.py), each setting of the manager it makes: EAGLE's
# lookahead hashes (vLLM's default), EAGLE's last-block drop in the window's group alone (the
# draft's group flagged, lookahead hashes off), multi-module MTP of 3 tokens (its hashes and
# prefill lookahead); and prompts given as embeddings, 60% of them
LOOKAHEAD_HASHES = Workload(speculative="eagle", num_speculative=2)
EAGLE_GROUPS = Workload(speculative="eagle", num_speculative=1, lookahead_hashes=False,
                        window=48, eagle_groups=(1,), blocks=60)
MTP = Workload(speculative="mtp", num_speculative=3)
PROMPT_EMBEDS = Workload(embeds=0.6)
# vLLM's AsyncScheduler (vllm_async.py) over full attention and a 48-token window (the tokens in
# flight hold the window's blocks), 60 blocks as ZEROING's, so that sessions still preempt
ASYNC = Workload(async_scheduling=True, window=48, blocks=60)
# ASYNC with speculative decoding: EAGLE's 2 draft tokens a step (`1 + 2` placeholders), some
# rejected at each output (vllm_async.py), with lookahead hashes as vLLM's default
ASYNC_SPEC = Workload(async_scheduling=True, window=48, blocks=60, speculative="eagle",
                      num_speculative=2)
# The fake connector under vLLM's AsyncScheduler: its loads reported with the output of a step
# while the next is in flight, FAKE_CONNECTOR's pool (vllm_async.py)
ASYNC_CONNECTOR = Workload(async_scheduling=True, fake_connector=True, blocks=24)
# The fake connector beside EAGLE's 2 draft tokens: synchronous loads of all but a prompt's last
# token, and whole prompts loaded, are padded with placeholder drafts (`pad_spec_decode`)
SPEC_CONNECTOR = Workload(fake_connector=True, blocks=24, speculative="eagle", num_speculative=2)
# Streaming input (vllm_streaming.py): half the requests resumable, each fed 1 to 3 updates;
# and the same under ASYNC's scheduler and groups
STREAMING = Workload(streaming=0.5)
ASYNC_STREAMING = Workload(async_scheduling=True, window=48, blocks=60, streaming=0.5)
# ASYNC under the V2 model runner (vllm_async.py)
ASYNC_V2 = Workload(async_scheduling=True, window=48, blocks=60, v2_runner=True)
# Structured output (fake_grammar.py): half the requests with a grammar, under the synchronous
# scheduler (with EAGLE's 2 drafts a step, proposed by the fake drafter and filtered by the
# grammars), and under ASYNC's scheduler and groups (with ASYNC_SPEC's drafts)
STRUCTURED = Workload(structured=0.5)
SPEC_STRUCTURED = Workload(structured=0.5, speculative="eagle", num_speculative=2)
ASYNC_STRUCTURED = Workload(async_scheduling=True, window=48, blocks=60, structured=0.5)
ASYNC_SPEC_STRUCTURED = Workload(async_scheduling=True, window=48, blocks=60, speculative="eagle",
                                 num_speculative=2, structured=0.5)
# The synchronous scheduler's draft tokens (fake_grammar.Drafter, no grammar): EAGLE's 2 a step
# (lookahead hashes, vLLM's default), and MTP's 3 (its hashes and prefill lookahead of 3)
SPEC_DRAFTS = Workload(speculative="eagle", num_speculative=2, drafts=True)
MTP_DRAFTS = Workload(speculative="mtp", num_speculative=3, drafts=True)
# A Mamba "align" group beside full attention (guard_mamba.py), of the "mamba align" profile's
# most common block size (4 tokens), with one prefill checkpoint block aligned to a block (as
# the profile's 85%); the default's prompts (up to 45 blocks of 4) and step (4 blocks' tokens),
# 100 blocks: sessions 0-5 preempt 8 times (160 blocks: never)
MAMBA_ALIGN = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                       max_batched_tokens=16)
# MAMBA_ALIGN under vLLM's AsyncScheduler (tokens in flight: judged by the reduced mode's
# `align_async.py`)
MAMBA_ASYNC = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                       max_batched_tokens=16, async_scheduling=True)
# MAMBA_ALIGN with multi-token prediction's 2 drafts a step under the synchronous scheduler (the
# fake drafter, as MTP_DRAFTS): the Mamba group's 2 speculative blocks (its
# `num_speculative_blocks`, the engine's `num_speculative_tokens`; 2 as the "mamba align"
# profile's largest draw). vLLM's config here has lookahead hashes, a prefill lookahead past one
# token and EAGLE's drop all off: one MTP module (prefill lookahead 1: nothing held back),
# lookahead hashes and the drop disabled (guard_mamba.py); the trace models the first two
# beside a Mamba group since 2026-12-06 (the workloads below), and EAGLE's drop too
# (MAMBA_EAGLE)
MAMBA_MTP = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                     max_batched_tokens=16, speculative="mtp", num_speculative=2, drafts=True,
                     mtp_modules=1, lookahead_hashes=False, eagle_drop=False)
# MAMBA_MTP as vLLM's MTP config has it by default but for the modules: lookahead hashes on
# (`num_hash_lookahead_tokens` 1, one module's prefill lookahead), EAGLE's drop then cleared
# (the scheduler passes `use_eagle` false); the reduced mode models the hashes beside the group
MAMBA_MTP_HASHES = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                            max_batched_tokens=16, speculative="mtp", num_speculative=2,
                            drafts=True, mtp_modules=1)
# and vLLM's default MTP config itself: 2 modules (multi-module MTP: a prefill lookahead of 2,
# lookahead hashes of 2 tokens), EAGLE's drop cleared
MAMBA_MTP_MODULES = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                             max_batched_tokens=16, speculative="mtp", num_speculative=2,
                             drafts=True)
# MAMBA_MTP with EAGLE's last-block drop on (lookahead hashes off: vLLM's
# `disable_lookahead_block_hashes`; the scheduler then passes `use_eagle`, so every group takes
# the drop and the Mamba group's checkpoints follow it): the reduced mode's `align_eagle.py`
MAMBA_EAGLE = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                       max_batched_tokens=16, speculative="mtp", num_speculative=2, drafts=True,
                       mtp_modules=1, lookahead_hashes=False)
# MAMBA_EAGLE with multi-module MTP (2 modules: a prefill lookahead of 2, 1 token held back from
# caching in both groups under the drop, `align_eagle.held_back`), hashed per block: h >= k, so
# never the prompts vLLM's scheduler stalls on (h + P % h < k); with 3 modules the scheduler
# stalls at a block boundary too (sessions 5, 37 and 73; docs/upstream-vllm.md)
MAMBA_EAGLE_MTP = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                           max_batched_tokens=16, speculative="mtp", num_speculative=2,
                           drafts=True, mtp_modules=0, lookahead_hashes=False)
# MAMBA_EAGLE hashed per 2 tokens (MAMBA_PARTIAL's unit and checkpoint alignment) with Mamba's
# shared-prefix checkpoint on: the scheduler ends a chunk at a shared-prefix junction and the
# manager keys its state there (`align_shared_prefix.py`)
MAMBA_SHARED_PREFIX = Workload(mamba="align", mamba_checkpoint=2, block_size=4, blocks=100,
                               max_batched_tokens=16, speculative="mtp", num_speculative=2,
                               drafts=True, mtp_modules=1, lookahead_hashes=False,
                               hash_block_size=2, mamba_shared_prefix=True)
# MAMBA_ALIGN hashed per 2 tokens (`prefix_match_unit` 2): partial hits, their copy-on-write
# (guard_mamba.CopyRetentions); the checkpoint aligned to a hash block, as the profile has it
MAMBA_PARTIAL = Workload(mamba="align", mamba_checkpoint=2, block_size=4, blocks=100,
                         max_batched_tokens=16, hash_block_size=2)
# MAMBA_ALIGN beside the fake connector (its hybrid class: loads done or failed whole, three in
# ten writing some groups only), asynchronous loads only: its synchronous answers are plain
# admissions through it (`fake_connector.connector_config(async_only=True)`), as the "mamba
# connector" profile makes them, for vLLM 0.33.0 counts a synchronous load's Mamba blocks one
# short (docs/upstream-vllm.md); `kv_both`, so every finish asks finalize_partial_tail_offloads
MAMBA_CONNECTOR = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                           max_batched_tokens=16, fake_connector=True)
# MAMBA_CONNECTOR with MAMBA_MTP's drafts (2 a step, one module, lookahead hashes and EAGLE's
# drop off): the scheduler's spec-decode padding beside the group through the connector, its
# plain admissions (a preempted request readmitted, a prompt met again) and the first step
# after a load that left one token (`align_external_pad.py`)
MAMBA_MTP_CONNECTOR = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                               max_batched_tokens=16, fake_connector=True, speculative="mtp",
                               num_speculative=2, drafts=True, mtp_modules=1,
                               lookahead_hashes=False, eagle_drop=False)
# MAMBA_MTP_CONNECTOR under vLLM's AsyncScheduler: the padded rows counted computed and in
# flight until the step's output (`rows_in_flight`), rolled back at its `settle`
MAMBA_ASYNC_MTP_CONNECTOR = replace(MAMBA_MTP_CONNECTOR, async_scheduling=True)
# MAMBA_CONNECTOR hashed per 2 tokens (MAMBA_PARTIAL's settings): partial hits and their
# copy-on-write beside the connector's loads (a copy's endpoints freed by the scheduler while
# the pool is near full: guard_mamba.CopyRetentions)
MAMBA_PARTIAL_CONNECTOR = Workload(mamba="align", mamba_checkpoint=2, block_size=4, blocks=100,
                                   max_batched_tokens=16, hash_block_size=2,
                                   fake_connector=True)
# MAMBA_CONNECTOR under vLLM's AsyncScheduler (MAMBA_ASYNC's tokens in flight beside the
# connector's asynchronous loads: their admission and report carry none, `guard_async.py`)
MAMBA_ASYNC_CONNECTOR = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                                 max_batched_tokens=16, fake_connector=True,
                                 async_scheduling=True)
# MAMBA_ASYNC_CONNECTOR with deferred aborts (`defer_block_free` on): a request aborted between
# schedule() and its step's output finishes with tokens in flight, up to two steps' (the one
# whose output is next and the one scheduled after it), its `remove_skipped_blocks` at its
# computed tokens less those (`guard_flight_finish.py`, `align_flight_finish.py`)
MAMBA_ASYNC_CONNECTOR_ABORTS = replace(MAMBA_ASYNC_CONNECTOR, deferred_aborts=0.05)
# MAMBA_MTP under vLLM's AsyncScheduler: draft tokens in flight beside the group (each step's
# `1 + 2` placeholders, the rejected rolled back at its output), judged by the reduced mode's
# `align_async.py` and `align_drafts.py`
MAMBA_ASYNC_MTP = Workload(mamba="align", mamba_checkpoint=4, block_size=4, blocks=100,
                           max_batched_tokens=16, speculative="mtp", num_speculative=2,
                           drafts=True, mtp_modules=1, lookahead_hashes=False, eagle_drop=False,
                           async_scheduling=True)
# MAMBA_SHARED_PREFIX under vLLM's AsyncScheduler: the junction's chunk stop and keyed state with
# tokens and drafts in flight (`align_shared_prefix.py` beside `align_async.py`)
MAMBA_ASYNC_SHARED_PREFIX = Workload(mamba="align", mamba_checkpoint=2, block_size=4,
                                     blocks=100, max_batched_tokens=16, speculative="mtp",
                                     num_speculative=2, drafts=True, mtp_modules=1,
                                     lookahead_hashes=False, hash_block_size=2,
                                     mamba_shared_prefix=True, async_scheduling=True)
# MAMBA_CONNECTOR with MAMBA_EAGLE's drafter (one MTP module, 2 drafts a step, lookahead hashes
# off, which a connector turns off anyway: `num_hash_lookahead_tokens` 0): EAGLE's drop beside
# the group and the fake connector's loads (`align_external_eagle.py`, since 2026-12-07)
MAMBA_EAGLE_CONNECTOR = replace(MAMBA_CONNECTOR, speculative="mtp", num_speculative=2,
                                drafts=True, mtp_modules=1, lookahead_hashes=False)
# Auxiliary outputs (vllm_aux.py): ASYNC_V2's scheduler and groups with vLLM's routed experts
# on, so that each admission's lookup is capped by the auxiliary-output connector
# (`max_cache_hit_length`, the trace's `Schedule.max_hit`)
AUX_OUTPUTS = replace(ASYNC_V2, aux_outputs=True)
# The caller's cap beside a KV connector and a Mamba "align" group (since 2026-12-07, later),
# under the V2 runner auxiliary outputs ask for: AUX_OUTPUTS' auxiliary-output connector beside
# ASYNC_CONNECTOR's fake KV connector (each connector lookup capped, `Connect.max_hit`; the
# external tokens those `cap_external_hit` left), beside MAMBA_ASYNC's group (the reduced
# mode's capped lookups), and beside both, with and without MAMBA_EAGLE_CONNECTOR's drafter
# (EAGLE's margin past the cap)
AUX_CONNECTOR = replace(ASYNC_CONNECTOR, v2_runner=True, aux_outputs=True)
AUX_MAMBA = replace(MAMBA_ASYNC, v2_runner=True, aux_outputs=True)
AUX_MAMBA_CONNECTOR = replace(MAMBA_ASYNC_CONNECTOR, v2_runner=True, aux_outputs=True)
AUX_MAMBA_EAGLE_CONNECTOR = replace(MAMBA_EAGLE_CONNECTOR, async_scheduling=True,
                                    v2_runner=True, aux_outputs=True)
