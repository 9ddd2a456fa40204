"""The streaming-input op of a `kvmanager` trace: vLLM's resumable requests, whose prompt comes
in parts (`StreamingUpdate`s). Standard library only; `trace.py` takes it into its op set.

vLLM 0.33.0's scheduler (`scheduler.py`: `add_request` 2931, `_handle_stopped_request` 2717,
`_update_request_as_session` 1879, the waiting loop's `else` branch 1262): a resumable request
that stops does not finish and makes no call on the manager. It keeps its blocks and its
computed tokens (every token but the one it sampled last, which is discarded: no slot was ever
asked for it) and waits for its next update; the update's prompt tokens are appended, the
request's outputs but that last one become prompt (`num_prompt_tokens` is then every token),
its block hashes are cut where the discarded token began and extended over the new tokens.
It is scheduled again with no lookup, as a request whose KV load is done: `allocate_slots`
with its computed tokens, the watermark and the whole-request check holding (it waits). A
final update of None frees it (`free`, a finish).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Stream:
    """A running request whose tokens are all computed stops, resumable (vLLM's streaming
    input): it keeps its blocks and its computed tokens and waits, `tokens` (its next
    streaming update's prompt) appended, all its tokens its prompt now; with no tokens it
    waits for an update, which a later `stream` of it brings. Its next allocation resumes it:
    a `schedule` with no lookup, as after a KV load. Resolves to nothing for a request neither
    running with every token computed nor waiting for an update, for a prompt given as
    embeddings (vLLM refuses them with streaming input: `AsyncLLM.generate`'s input stream
    raises "prompt_embeds not supported for streaming inputs", and a `StreamingUpdate` has no
    embeddings), or past `max_model_len` tokens.

    `images`: the update's multimodal inputs (vLLM's `StreamingUpdate.mm_features`), their
    placeholders among its tokens: their extra keys go into the hashes of the blocks they lie
    in, as an arrival's do. Resolves to nothing for images without tokens.

    An update of no tokens (vLLM's front end never sends one; its scheduler takes it, the
    request then waiting with every token computed, and fails its next step's resumption) is
    to the manager a stop that waits: `stream` of no tokens, its end an abort (`finish`).

    `discard` (asynchronous scheduling, or draft slots: speculative decoding's caching after
    every output): the request's last token is the one the stop discards (the scheduler's
    caching after the output sampled it first), its slot that of the step in flight (with
    drafts, k placeholder drafts' slots after it) or none: the token is dropped, the request
    keeps the others computed, and its tokens in flight stay counted (the step's output is
    dropped when it comes, a `processed` of the waiting request). Under lookahead hashing a
    block hash covering the dropped token is kept (vLLM's cut keeps it: its lookahead read the
    token) until the request's next lookup makes its hashes again. Resolves to nothing
    without asynchronous scheduling or draft slots, or where
    the request's last token is its prompt's (no sampled token to drop). There, a
    `stream` (without `discard`) applies to a waiting request preempted before, with nothing
    computed, too: its stale output stopped it (the token it delivered is the one discarded);
    it is admitted again through the cache."""

    rid: int
    tokens: tuple[int, ...] = ()
    discard: bool = field(default=False, metadata={"later": True})
    # the update's multimodal inputs (identifier, offset, length), offsets from its first token
    # (as the update's own prompt places them): the request's images from then on, shifted to
    # where its tokens start (`_update_request_as_session` adds the request's tokens then)
    images: tuple[tuple[str, int, int], ...] = field(default=(), metadata={"later": True})


OPS = {"stream": Stream}


def describe(op: Stream) -> str:
    if not op.tokens:
        return f"r{op.rid} stops, resumable: it waits for its next streaming update"
    images = f" and {len(op.images)} images" if op.images else ""
    return f"r{op.rid} takes a streaming update of {len(op.tokens)} tokens{images} (kept blocks)"
