"""What every live driver shares (`impl/<target>/live.py`, `kvfuzz.guard`): the engine's call,
held until the lock step reaches it and then made exactly once, with the engine's own
arguments. Whatever the call returns or raises is the engine's: the guard hands it back."""

from __future__ import annotations


class CallMismatch(Exception):
    """The lock step asked for a call the engine did not make (a bug of the guard's op
    mapping, never the implementation's): the driver's `mismatch` says which."""


class Pending:
    """The engine's call, waiting for the lock step: `method` (the lock step's driver method
    it stands for), `expected(args)` (why the lock step's arguments are not the engine's, or
    None) and `perform()` (the real call; its raw result, or its exception, is the engine's)."""

    def __init__(self, method: str, perform, expected=lambda args: None):
        self.method, self.perform, self.expected = method, perform, expected
        self.done, self.result, self.error = False, None, None

    def outcome(self):
        """What the engine's call gives back: its result, or its exception raised again."""
        if self.error is not None:
            raise self.error
        return self.result


class LiveCalls:
    """The `pending` call and `_perform`, which the lock step's driver methods go through."""

    pending: Pending | None = None
    mismatch: str | None = None

    def _perform(self, method: str, args: tuple):
        pending = self.pending
        if pending is None or pending.done or pending.method != method:
            made = "none" if pending is None or pending.done else pending.method
            self.mismatch = f"the lock step called {method}{args} where the engine's call is {made}"
            raise CallMismatch(self.mismatch)
        reason = pending.expected(args)
        if reason:
            self.mismatch = reason
            raise CallMismatch(reason)
        pending.done = True
        try:
            pending.result = pending.perform()
        except BaseException as error:  # the lock step judges it; the engine gets it back
            pending.error = error
            raise
        return pending.result


class LiveSlotCalls(LiveCalls):
    """The calls and reads SGLang's slot allocators share (`impl/allocator/live.py`,
    `impl/mamba/live.py`): `alloc(n)` read back as plain ints, `free` of slots, the end of a
    group, `clear()`, `available_size()`."""

    allocator: object

    def __init__(self, allocator):
        self.allocator = allocator

    def alloc(self, need_size: int):
        from kvfuzz.impl.driver_calls import int_list  # imports torch

        return int_list(self._perform("alloc", (need_size,)))

    def free_slots(self, slots) -> None:
        self._perform("free_slots", (list(slots),))

    def group_end(self) -> None:
        self._perform("group_end", ())

    def clear(self) -> None:
        self._perform("clear", ())

    def available_size(self) -> int:
        return int(self.allocator.available_size())
