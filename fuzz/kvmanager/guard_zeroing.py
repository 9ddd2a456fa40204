"""The live kvmanager guard's mapping of KV-cache zeroing (mixed into `GuardedManager`,
`guard.py`), as vLLM 0.33.0's scheduler makes it where `KVCacheConfig.needs_kv_cache_zeroing`
(the trace's `zeroing`: a second attention group in another precision):

- `take_new_block_ids()`: the scheduler drains the manager's records every step
  (`_get_new_block_ids_to_zero`) and hands them to the worker, which zeroes those blocks before
  the step writes them. It is no op of the trace: the guard makes the call, takes the oracle's
  records too and compares both lists. Between two takes the lock step compares the records
  after every op without emptying either list (`KVManagerLockstep.zeroing_read_only`, the
  live driver's `pending_new_block_ids`), so a wrong record is reported at the op that made it;
- `record_blocks_for_zeroing(request_id, start)`: the scheduler's call right after the
  `cache_blocks` of a failed load's valid prefix, part of that `loaded` op (the batch judge
  makes both calls for it): the guard lets it through only where the lock step owes it
  (`zeroing_owed`), then compares the records.

Which blocks the contract records (read in `single_type_kv_cache_manager.py`,
`kv_cache_coordinator.py`, `kv_cache_manager.py`): every block an attention group takes from
the pool's free queue (`allocate_new_blocks`, and `allocate_external_computed_blocks` unless
the caller names the group as written by its load), in the order taken, group after group; a
hit's blocks (cached, already written) never; a failed load's blocks from its valid prefix on
again. Without zeroing the lists stay empty and the calls go through unchecked.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.guard import modelled


class ZeroingCalls:
    """Mixed into `GuardedManager` (its session, driver, `_refuse`)."""

    @modelled
    def take_new_block_ids(self):
        manager, session = self._kvfuzz_object, self.kvfuzz_session
        if not session.checking or not session.header.zeroing:
            return manager.take_new_block_ids()
        lock = session.lock
        if lock.zeroing_owed is not None:
            self._refuse(f"take_new_block_ids before the record_blocks_for_zeroing"
                         f"{lock.zeroing_owed} the scheduler makes after a failed load")
        vars(self)["_kvfuzz_made"] = True
        taken = manager.take_new_block_ids()
        expected = lock.model.take_new_block_ids()
        actual = [int(block) for block in taken]
        if actual != expected:
            session.report_last([("zeroing", f"take_new_block_ids: expected {expected}, "
                                              f"actual {actual}")])
        return taken

    @modelled
    def record_blocks_for_zeroing(self, request_id, start_token):
        manager, session = self._kvfuzz_object, self.kvfuzz_session
        perform = lambda: manager.record_blocks_for_zeroing(  # noqa: E731
            request_id, start_token)
        if not session.header.zeroing:
            return perform()  # nothing is recorded without zeroing
        tracked = self._kvfuzz_requests.get(request_id)
        lock = session.lock
        owed = None if lock is None else lock.zeroing_owed
        wanted = None if tracked is None else (tracked.rid, int(start_token))
        if lock is None:  # recording: the `loaded` op already holds the call
            return perform()
        if owed is None or owed != wanted:
            self._refuse(f"record_blocks_for_zeroing({request_id!r}, {start_token}) where the "
                         f"trace owes {owed} (only after a failed load's cache_blocks)")
        vars(self)["_kvfuzz_made"] = True
        result = perform()
        lock.zeroing_owed = None
        problems = lock.zeroing_problems()
        if problems:
            session.report_last(problems)
        return result
