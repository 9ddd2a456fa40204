"""The swa lock step's handlers of what a scheduler asks beyond growing and releasing requests
(`strategies/swa/scheduler_ops.py`): a request finished into the prefix cache, room reclaimed
through that cache, a resize, a KV offload, and caller bugs (`misuse.py` picks the wrong call).
The prefix cache both sides are handed is one class (`impl/swa/prefix_cache.py`) over each
side's releases, holding the requests cached so far, oldest first."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, handles, short
from kvfuzz.fuzz.swa.misuse import misuse_call
from kvfuzz.impl.swa.prefix_cache import Cached, PrefixCache
from kvfuzz.strategies.swa.scheduler_ops import (MISUSES, Cache, Misuse, Offload, Reclaim,
                                                 Resize)

EVENTS = ("cache", "reclaim", "reclaim evicted", "reclaim for a preallocation",
          "reclaim short", "reclaim without a sharing cache", "resize", "offload",
          *(f"misuse rejected: {kind}" for kind in MISUSES))


class SchedulerCalls:
    """Mixed into `SWALockstep`, which keeps the tables these read and write (`rows`,
    `evicted`, and `cached`: the rids the prefix cache holds, oldest first)."""

    @handles(Cache)
    def cache(self, op: Cache):
        if op.rid not in self.rows or op.rid in self.cached:
            return
        if not self.rows[op.rid]:  # nothing to keep: the scheduler only forgets it
            del self.rows[op.rid], self.evicted[op.rid]
            return
        self.cached[op.rid] = None
        self.count("cache")
        yield Call(f"r{op.rid} finished into the prefix cache")

    @handles(Reclaim)
    def reclaim(self, op: Reclaim):
        if op.prealloc and op.tree == "none":
            return  # a preallocation's callers always hand their cache
        model = self.model
        available = {"full": model.full.available_size(), "swa": model.swa.available_size()}
        demand = max(0, available["swa" if op.prealloc else op.pool] + op.delta)
        full_demand = max(0, available["full"] + op.delta)
        entries = [(rid, self.rows[rid][:self.evicted[rid]], self.rows[rid][self.evicted[rid]:])
                   for rid in self.cached]
        cache = None if op.tree == "none" else PrefixCache(
            self._model_release, [Cached(*entry) for entry in entries],
            sharing=op.tree == "radix")

        def answer():
            if op.prealloc:
                result = model.reclaim_for_prealloc(cache, full_demand, demand)
            else:
                result = model.evict_to_free_tokens(cache, demand)
            return {"asked": [] if cache is None else [list(ask) for ask in cache.asked],
                    "result": result}

        name = "reclaim_for_prealloc" if op.prealloc else "evict_to_free_tokens"
        self.count("reclaim for a preallocation" if op.prealloc else "reclaim")
        result = yield Call(f"{name}({op.tree} cache of {len(entries)} requests, {demand})",
                            "reclaim", (op.tree, entries, demand, op.prealloc, full_demand),
                            oracle=answer, compared=True, compare=_reclaim_problems)
        if isinstance(result.expected["result"], str):
            self.count("reclaim short")
        self._forget_evicted(cache)

    def _model_release(self, method: str, slots: list[int]) -> None:
        getattr(self.model, method)(slots)

    def _forget_evicted(self, cache: PrefixCache | None) -> None:
        """The cache's requests as the oracle's side left them: gone, or their window gone."""
        if cache is None or not cache.sharing:
            if cache is not None:
                self.count("reclaim without a sharing cache")
            return
        kept = {entry.rid: entry for entry in cache.entries}
        if cache.asked:
            self.count("reclaim evicted")
        for rid in list(self.cached):
            if rid not in kept:
                del self.rows[rid], self.evicted[rid], self.cached[rid]
            else:
                self.evicted[rid] = len(kept[rid].dead)

    @handles(Resize)
    def resize(self, op: Resize):
        trace, P = self.trace, self.P
        if not (P <= op.size <= trace.size and P <= op.size_swa <= trace.size_swa):
            return  # beyond what the allocator was built with: its mapping is that long
        self.count("resize")
        yield Call(f"resize({op.size} full, {op.size_swa} SWA tokens)", "resize",
                   (op.size, op.size_swa))
        self._forget_all()

    @handles(Offload)
    def offload(self, op: Offload):
        row = self.rows.get(op.rid)
        if not row or op.rid in self.cached:
            return
        self.count("offload")
        # The KV pool is handed the row on the way out and back, with the copy it made (0).
        expected = [["get_cpu_copy", row, None, None], ["load_cpu_copy", row, None, None, 0], 0]
        yield Call(f"offload r{op.rid}: get_cpu_copy({short(row, 40)}) and load_cpu_copy of "
                   f"that copy", "offload", (row,), oracle=lambda: expected, compared=True)

    @handles(Misuse)
    def misuse(self, op: Misuse):
        call = misuse_call(self, op)
        if call is not None:
            self.count(f"misuse rejected: {op.kind}")
            yield call


def _reclaim_problems(expected, rejected, actual, raised) -> list[tuple[str, str]]:
    """What the cache was asked, exactly; a preallocation's result: None, or the shortfall
    naming the SWA tokens needed and available (the caller attaches it to its request)."""
    from kvfuzz.fuzz.engine.lockstep import call_problems

    if rejected is not None or raised is not None:
        return call_problems(True, expected, rejected, actual, raised)
    problems = []
    if actual["asked"] != expected["asked"]:
        problems.append(("prefix cache asked", f"evict_for_alloc(num_tokens, swa_num_tokens): "
                         f"expected {expected['asked']}, actual {actual['asked']}"))
    want, got = expected["result"], actual["result"]
    if isinstance(want, str) or isinstance(got, str):
        numbers = want.split(": ", 1)[-1].split(", ") if isinstance(want, str) else []
        if not isinstance(want, str) or not isinstance(got, str) or \
                not all(number in got for number in numbers):
            problems.append(("None vs success", f"reclaim_for_prealloc: expected {want!r}, "
                                                f"actual {got!r}"))
    return problems
