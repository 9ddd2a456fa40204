"""A finish with tokens in flight under a KV connector (vLLM 0.33.0's `_connector_finished`,
scheduler.py 3366-3374): `remove_skipped_blocks(request, max(0, num_computed_tokens -
num_in_flight_tokens))`, the skipped blocks freed on the processed count. Shared by the lock
step's `remove_skipped` (`free_ops.py`) and the reduced Mamba "align" mode's
(`align_external.py`), and the guard's mapping (`guard_connector.py`).

What the engine counts in flight at a finish is more than the trace's steps in flight can be.
`_update_after_schedule` (scheduler.py 1857-1859) adds each scheduled step's tokens to
`num_in_flight_tokens`, `update_from_output` (2317-2318) takes them off when that step's output
is processed. Under the `AsyncScheduler` with its batch queue of two (`max_concurrent_batches`)
the engine schedules step N+1 of a request before it processes step N's output, and an abort
(`finish_requests`) comes between engine steps: after N+1 is scheduled and before N's output,
both N's and N+1's tokens count in flight. The trace's asynchronous mode keeps, after each
allocation, only that allocation's step in flight (`async_ops.flown`, the last
`steps_in_flight`): N's output is processed before anything else of the request is allocated,
so at the next allocation only N+1 is ever in flight. A finish is no allocation: the steps the
last allocation took out of `flights` (`async_ops.taken_out`, the request's `older`) may still
be in flight then. So `MAMBA_ASYNC_CONNECTOR_ABORTS` session 0's req-9: computed 58, the engine
2 in flight (its steps of 1 token each: N and N+1), the trace's `flights == [1]` (N+1), `older
== 1` (N) -- not a bookkeeping bug, the trace's record read at a finish.

The `remove_skipped` op carries `older` (the guard writes the engine's count less the trace's
`flights`): the lock step subtracts it only where it is the request's own `older` (or 0, the
older output processed first), else counts `IGNORED` and subtracts none (a fuzzer's value)."""

from __future__ import annotations

FINISH_IN_FLIGHT = "a finish with tokens in flight: remove_skipped_blocks below them"
OLDER_IN_FLIGHT = "a finish with two steps in flight (an older step's output not processed)"
IGNORED = "a finish's older tokens in flight not the request's: none subtracted"
EVENTS = (FINISH_IN_FLIGHT, OLDER_IN_FLIGHT, IGNORED)


def processed_at_finish(lock, op, request) -> int:
    """The processed count the scheduler passes a finish's `remove_skipped_blocks`: the
    request's computed tokens less its tokens in flight (none when synchronous), and less
    `op.older` where that is its `older` (the steps its last allocation took out of flight)."""
    if not lock.trace.async_scheduling:
        return request.computed
    older = getattr(op, "older", 0)
    if older and older != getattr(request, "older", 0):
        lock.count(IGNORED)
        older = 0
    flying = request.in_flight + older
    if flying:
        lock.count(FINISH_IN_FLIGHT)
    if older:
        lock.count(OLDER_IN_FLIGHT)
    return max(0, request.computed - flying)


def older_in_flight(tracked, actual: int) -> tuple[int, int] | None:
    """The guard's reading of a finish's `remove_skipped_blocks` of a request with `actual`
    tokens in flight (the engine request's `num_in_flight_tokens`): how many of the trace's
    steps in flight (oldest first) the engine processed the output of unseen (a prefill chunk's
    output makes no call: a `processed` each), and the tokens in flight beyond the trace's
    `flights` (the older step's: `op.older`, which the lock step judges against its own record,
    and the processed count the engine passes against its own); None where it is neither."""
    left = [sum(tracked.flights[i:]) for i in range(len(tracked.flights) + 1)]
    if actual in left:
        return left.index(actual), 0
    return (0, actual - tracked.in_flight) if actual > tracked.in_flight else None


def skipped_at(lock, rid, request, processed: int) -> None:
    """The reduced mode after a finish's `remove_skipped` of a running request at `processed`
    tokens: with none in flight its table is kept from here as after a step from `processed` to
    `processed` (none of its last step's read state or checkpoint); with tokens in flight the
    states of its steps in flight stay too, which the op judged exactly (every position below
    (p - 1) // b nulled, nothing else), and the scheduler frees the request right after
    (`_free_request`): it is `finishing`, its table judged by no rule until then."""
    if processed < request.computed:
        request.finishing = True
        return
    lock.read_from[rid] = processed
    lock.checkpoints.pop(rid, None)
