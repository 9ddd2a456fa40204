"""The compaction judge's HiCache load-back ops (`reserve`, `release`), a mixin of
`CompactionLockstep`: a reservation's pages (`alloc_physical`) are compared with the oracle's,
and its rollback (`cancel_physical_reservation`) makes them holes. Lazy pools only: an eager
pool moves pages inside `free`, which the released class asserts it never does while a
reservation is held, so an eager side's trace runs without these ops (nothing called, nothing
checked)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, crash_problems, handles
from kvfuzz.oracle.compaction.tokens import tokens_of
from kvfuzz.strategies.compaction.trace import Release, Reserve

EVENTS = ("reserve", "reserve refused", "release", "pages reserved", "clear with pages reserved",
          "flush blocked by a reservation")


class LoadBackOps:
    @handles(Reserve)
    def reserve(self, op: Reserve):
        model, pool = self.model, op.pool
        if not model.lazy:
            return
        n = max(1, model.avail(pool) + op.n) if op.relative else op.n

        size = self.params.page_size  # `alloc_physical` takes tokens, returns physical slots

        def answer():
            expected = model.reserve(pool, n)
            self.count("reserve refused" if expected is None else "reserve")
            return None if expected is None else tokens_of(expected, size)

        def compare(expected, rejected, actual, raised):
            if raised is not None:
                return crash_problems(raised)
            unit = "pages" if size == 1 else "slots"
            return [] if expected == actual else [
                ("result", f"{pool}: result of reserve {n}{pages_of_tokens(size)}: expected {unit} "
                           f"{expected}, actual {actual}")]
        self.result = None
        yield Call(f"reserve {pool} {n}{pages_of_tokens(size)}", "reserve", (pool, n * size),
                   oracle=answer, compared=True, compare=compare)

    @handles(Release)
    def release(self, op: Release):
        """Nothing held (or an eager pool): nothing to give back, no call."""
        held = self.model.pools[op.pool].reservations if self.model.lazy else []
        if not held:
            return
        pages = held[0 if op.which == "oldest" else -1]
        self.count("release")
        self.result = None
        yield Call(f"release {op.pool} {op.which}: pages {pages}", "release",
                   (op.pool, op.which), oracle=lambda: self.model.release(op.pool, op.which))


def pages_of_tokens(page_size: int) -> str:
    """How a count of pages reads in a report when a page is more than one token."""
    return "" if page_size == 1 else f" pages ({page_size} tokens each)"
