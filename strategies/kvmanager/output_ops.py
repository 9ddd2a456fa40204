"""The ops of a `kvmanager` trace around a step's output (`trace.py` takes them into its op set):
a token sampled with no slot asked, the slot of a token still in flight (asynchronous
scheduling's placeholder), an output processed, and the caching after an output with draft
tokens. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import LATER


@dataclass(frozen=True)
class Sample:
    """A running request whose tokens are all computed samples `token` and asks for no slot
    before it leaves (a real scheduler preempts it first, or it is done): no call. Its next
    allocation, if any, is a `schedule` of the token; resolves to nothing where `decode` does.
    Under asynchronous scheduling also the token of a `placeholder` allocation, once its step's
    output is processed (the request then has its tokens computed).

    `stale` (asynchronous scheduling): the token of a step still in flight when the request was
    preempted, which vLLM still delivers (its "stale output"): appended to the waiting request,
    admitted again with it. Resolves to nothing for a request that is not waiting after a
    preemption, or at `max_model_len` tokens."""

    rid: int
    token: int
    stale: bool = field(default=False, metadata=LATER)


@dataclass(frozen=True)
class Placeholder:
    """Asynchronous scheduling (`async_scheduling`): a running request whose tokens are all
    computed gets the slot of the token its step in flight samples, before that token is known
    (vLLM's `AsyncScheduler` output placeholder, `num_output_placeholders`):
    `allocate_slots(request, 1)` over the request's tokens as they are; the `sample` of the
    token comes when that step's output is processed. Resolves to nothing without
    asynchronous scheduling or within one token of `max_model_len` (the scheduler schedules
    no position there).

    `drafts` (speculative decoding under asynchronous scheduling): the step also schedules that
    many draft tokens after the token, placeholders the worker fills in (vLLM's `1 +
    num_spec_tokens` output placeholders a step): `allocate_slots(request, 1 + drafts)`. The
    request then counts them computed too, past its tokens, until its `settle` rolls back the
    rejected ones; so a placeholder also applies where the drafts of the step in flight
    are counted computed past the request's tokens (its tokens all computed), and, with
    drafts, where its last token is not computed and nothing is in flight (a request that sat
    out a step: a decode with drafts). Resolves to nothing where the token, the drafts and the
    token sampled after them pass `max_model_len`."""

    rid: int
    drafts: int = field(default=0, metadata=LATER)


@dataclass(frozen=True)
class Processed:
    """Asynchronous scheduling: the output of the request's last step is processed before its
    next allocation (no call): none of its tokens are in flight then (without it, a running
    request's previous allocation is). Resolves to nothing for a request that is not
    running, but one waiting after a streaming stop whose step was in flight (`stream` with
    `discard`: that step's output dropped)."""

    rid: int


@dataclass(frozen=True)
class Settle:
    """`cache_blocks(request, num_computed_tokens)` of a running request after its step's
    output, as vLLM's scheduler makes it with draft tokens (speculative decoding), the sampled
    token appended first (a `sample`): a block whose lookahead hash waited for that token is
    cached now, not at the request's next allocation. Resolves to nothing for a request that
    is not running. Only the guard's recordings of vLLM's scheduler make it.

    `rejected` (speculative decoding under asynchronous scheduling): the drafts the output
    rejected, and the tokens a stop trimmed, rolled back from the request's computed tokens
    first (`update_from_output`: `num_computed_tokens -= num_rejected`), so that what is
    cached is what was processed. Resolves to nothing where a rollback would leave fewer
    computed tokens than the request has but its last sampled one; beside a Mamba "align" group
    (the reduced mode) also where vLLM's scheduler makes no such rollback: with no `sample` of
    its output since the request's last allocation or settle, or leaving other than its tokens
    but the last processed (`align_async.settle_made`: vLLM rolls back only the drafts of the
    step whose output it processes, with that output's tokens)."""

    rid: int
    rejected: int = field(default=0, metadata=LATER)
