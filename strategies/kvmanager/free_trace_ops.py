"""The ops of a `kvmanager` trace that end a request's hold on its blocks (`trace.py` takes them
into its op set): a preemption, a finish (either deferred past a step in flight), the deferred
free's release, and a window's skipped blocks freed before a connector reads the table.
Standard library only."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import LATER


@dataclass(frozen=True)
class Preempt:
    """`free(request)` of a running request, which goes back to waiting with
    `num_computed_tokens` 0 and its tokens kept (it is admitted again through the cache).
    `defer`: the scheduler defers the free (`pop_blocks_for_free(request)`, as vLLM's does while
    a step in flight may still write the blocks): the request's tables are emptied, its blocks
    stay held until a `release` of it returns them to the pool.

    `refused` (since 2026-12-07): the preemption vLLM's running loop makes after the request's
    own allocation was refused, where it is the lowest-priority running request (it preempts
    itself; its step in flight's output then comes stale): resolves to nothing unless the
    request's last allocation was refused (the generator cannot foresee the pool's answer)."""

    rid: int
    defer: bool = field(default=False, metadata=LATER)
    refused: bool = field(default=False, metadata=LATER)


@dataclass(frozen=True)
class Finish:
    """`free(request)`: the request is done (waiting or running). `defer`: as `preempt`'s."""

    rid: int
    defer: bool = field(default=False, metadata=LATER)


@dataclass(frozen=True)
class Release:
    """The oldest deferred free of request `rid` (a `preempt` or `finish` with `defer`) done:
    the scheduler's `block_pool.free_blocks(reversed(blocks))` of the blocks that
    `pop_blocks_for_free` gave it (`_drain_deferred_frees`, once the step that may write them is
    processed). Resolves to nothing when none of `rid` is pending."""

    rid: int


@dataclass(frozen=True)
class RemoveSkipped:
    """`remove_skipped_blocks(request_id, computed tokens, prompt tokens)` of a live request:
    the blocks its second group's window (or chunk) skips freed now, as the scheduler does
    before a KV connector's `request_finished` reads the block table (`_connector_finished`,
    at every finish with a connector). The computed tokens are the request's, less those in
    flight. Resolves to nothing for a request that is not live.
    `older`: under asynchronous scheduling, the tokens of the step(s) before those the request
    holds in flight whose output the engine had not processed either at the finish (an abort
    between the scheduling of the request's last step and the output of the one before:
    vLLM's `num_in_flight_tokens` counts both); subtracted too, and only where they are the
    tokens of the steps the request's last allocation took out of flight (else none)."""

    rid: int
    older: int = field(default=0, metadata=LATER)
