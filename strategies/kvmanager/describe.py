"""One line per kvmanager trace op, for divergence reports (`LockstepJudge`'s `describe_op`):
what the op asks of the manager in a scheduler's words."""

from __future__ import annotations

from kvfuzz.strategies.kvmanager import connector_ops, stream_ops
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Cut, Loaded
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import (Arrive, Decode, Evict, Finish, Op, Placeholder,
                                               Preempt, Processed, Release, RemoveSkipped, Sample,
                                               Schedule, Settle)


def describe_op(op: Op) -> str:
    if isinstance(op, Arrive):
        keys = ([f"LoRA {op.lora!r}"] if op.lora else []) + \
            ([f"salt {op.salt!r}"] if op.salt else []) + \
            [f"{ident!r} at {offset}+{length}" for ident, offset, length in op.images]
        keys += ["as embeddings"] if op.embeds else []
        return (f"r{op.rid} arrives with {len(op.tokens)} prompt tokens"
                f"{', skipping the prefix cache' if op.no_cache_read else ''}"
                f"{' (' + ', '.join(keys) + ')' if keys else ''}")
    if isinstance(op, Schedule):
        padded = f" ({op.pad} placeholder drafts where one is left" \
            f"{', in flight until its output' if op.rows_in_flight else ''})" if op.pad else ""
        again = ", made again after its refusal and a preemption" if op.again else ""
        return f"schedule r{op.rid}, up to {op.chunk} tokens{padded}{again}"
    if isinstance(op, Decode):
        return f"decode r{op.rid} (token {op.token})"
    if isinstance(op, Sample):
        stale = " (a step's stale output, after its preemption)" if op.stale else ""
        return f"r{op.rid} samples token {op.token}, no slot asked{stale}"
    if isinstance(op, Placeholder):
        drafts = f" and {op.drafts} draft slots after it" if op.drafts else ""
        return f"r{op.rid} gets the slot of the token its step in flight samples{drafts}"
    if isinstance(op, Processed):
        return f"r{op.rid}'s last step's output processed: no tokens in flight"
    deferred = ", its free deferred" if getattr(op, "defer", False) else ""
    if isinstance(op, Preempt):
        return f"preempt r{op.rid}{deferred}"
    if isinstance(op, Finish):
        return f"finish r{op.rid}{deferred}"
    if isinstance(op, Release):
        return f"release r{op.rid}'s deferred blocks to the pool"
    if isinstance(op, RemoveSkipped):
        return f"remove r{op.rid}'s skipped blocks (before a connector's request_finished)"
    if isinstance(op, Settle):
        rejected = f", {op.rejected} rejected drafts rolled back first" if op.rejected else ""
        return f"cache r{op.rid}'s blocks after its step's output{rejected}"
    if isinstance(op, (Connect, Loaded, Cut)):
        return connector_ops.describe(op)
    if isinstance(op, Stream):
        return stream_ops.describe(op)
    if isinstance(op, Evict):
        return f"evict blocks {' '.join(map(str, op.block_ids)) or '-'}"
    return "reset prefix cache"
