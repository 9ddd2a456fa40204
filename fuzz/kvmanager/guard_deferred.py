"""The live kvmanager guard's mapping of deferred frees (mixed into `GuardedManager`,
`guard.py`), as vLLM 0.33.0's scheduler makes them when a step in flight may still write a
freed request's blocks (`Scheduler.defer_block_free`: overlapping batches and a consumer KV
connector):

- `pop_blocks_for_free(request)` (`_free_request_blocks`): `finish` or `preempt` with `defer`
  (`GuardedManager._free`); the blocks it returns are kept here;
- `kv_cache_manager.block_pool.free_blocks(reversed(blocks))` of those blocks, once the step is
  processed (`_drain_deferred_frees`): `release(rid)`. The guarded manager's `block_pool` is a
  proxy of the pool whose `free_blocks` comes here; a copy-on-write retention's free is no op
  (`guard_mamba.CopyRetentions`); any other list freed through it is refused.
"""

from __future__ import annotations

import sys

from kvfuzz.fuzz.engine.guard import GuardUnsupported, modelled
from kvfuzz.strategies.kvmanager.trace import Release


class DeferredFrees:
    """Mixed into `GuardedManager` (its `_free`, `_run`, `_refuse`, records)."""

    @modelled
    def pop_blocks_for_free(self, request):
        """A free the scheduler defers (`_free_request_blocks` while a step in flight may
        still write the blocks): `finish` or `preempt` with `defer`; the blocks it returns are
        kept to be matched when the scheduler frees them on the pool (`block_pool`)."""
        return self._free(request, defer=True)

    @property
    def block_pool(self):
        """The manager's pool as the scheduler reaches it through the manager: its
        `free_blocks` of a deferred free's blocks is that free's `release` (every other use goes
        straight to the pool)."""
        if "_kvfuzz_pool" not in vars(self):
            vars(self)["_kvfuzz_pool"] = _DrainedPool(self)
        return self._kvfuzz_pool

    def _release(self, ordered_blocks):
        """`block_pool.free_blocks(blocks)` from the scheduler: the blocks of a deferred free,
        last popped first (`_drain_deferred_frees`), are `release(rid)`; any other list is
        refused (the trace frees blocks through the manager alone)."""
        session, pool = self.kvfuzz_session, self._kvfuzz_object.block_pool
        if not session.recording:
            return pool.free_blocks(ordered_blocks)
        blocks = list(ordered_blocks)
        if self._retention_freed(blocks):  # (guard_mamba.py)
            return pool.free_blocks(blocks)
        try:
            rid = self._deferred_owner(blocks)
        except GuardUnsupported as refused:
            if session.on_unsupported != "stop":
                raise
            session.spent = True
            print(f"{refused}; the guard stops here, calls go through unchecked",
                  file=sys.stderr)
            return pool.free_blocks(blocks)
        self._kvfuzz_lookups.clear()
        try:
            return self._run(Release(rid), "release", lambda: pool.free_blocks(blocks),
                             lambda args: None if tuple(args) == (rid,) else
                             f"the lock step releases {args}, the engine r{rid}'s blocks")
        finally:
            vars(self)["_kvfuzz_made"] = False

    def _deferred_owner(self, blocks) -> int:
        """The rid whose oldest deferred free `blocks` are, reversed (and forgotten here)."""
        popped = blocks[::-1]
        for index, (rid, held) in enumerate(self._kvfuzz_deferred):
            if len(held) == len(popped) and all(a is b for a, b in zip(held, popped)):
                if any(owner == rid for owner, _ in self._kvfuzz_deferred[:index]):
                    break  # an older deferred free of the request is still pending
                del self._kvfuzz_deferred[index]
                return rid
        self._refuse(f"block_pool.free_blocks of {len(blocks)} blocks that are not a deferred "
                     f"free's, last popped first (the trace frees blocks through the manager)")


class _DrainedPool:
    """The pool the guarded manager hands the scheduler (`GuardedManager.block_pool`): its
    `free_blocks` goes through the guard (a deferred free's release); every other attribute
    is the pool's own."""

    def __init__(self, guarded):
        vars(self)["_kvfuzz_guarded"] = guarded

    @property
    def __class__(self):
        """The pool's class (an engine's isinstance checks hold, as for the guard itself)."""
        return type(self._kvfuzz_guarded._kvfuzz_object.block_pool)

    def free_blocks(self, ordered_blocks):
        return self._kvfuzz_guarded._release(ordered_blocks)

    def __getattr__(self, name: str):
        return getattr(self._kvfuzz_guarded._kvfuzz_object.block_pool, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._kvfuzz_guarded._kvfuzz_object.block_pool, name, value)
