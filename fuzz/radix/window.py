"""The radix judge for a pure-SWA cache with its sliding window (a trace with `swa_window`): the
radix lock step (`lockstep.py`: the same ops, calls, invariants and tree model) over
`PureSWARadixCache` on SGLang's pure-SWA allocator, with the window's calls where the scheduler
makes them (`evict_sliding_windows` before a decode step, `swa_evict_floor` after a prefill chunk
where the model runner is prefill-aware, evictions asked with `swa_num_tokens`), against the
window model (`oracle.radix.window`). After every op, besides the radix checks (whose pool
invariant and free pages now count the window's frees: a freed slot cached, or freed twice,
shows there): each live request's window cursor, and the four SWA/full size reads against the
tree's nodes (with the sign) and the model. `ByWindow` is the target's judge: this one for a
trace with a window, the radix one for the rest."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, crash_problems, handles
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.fuzz.radix.lockstep import RadixLockstep, extend_plan, rows_needed
from kvfuzz.oracle.radix.invariants import size_problems
from kvfuzz.oracle.radix.window import WindowModel, dead_lo
from kvfuzz.strategies.radix.trace import Checkpoint, Extend, Finish

SLIDES, FREES, FLOOR, CUT, SKIPS, NO_CALL = (
    "window slides", "window frees slots", "floor set after a prefill chunk",
    "checkpoint cut at the floor", "release skips what the window freed",
    "checkpoint in decode: no such call before 0.5.22")
WINDOW_EVENTS = (SLIDES, FREES, FLOOR, CUT, SKIPS)  # (NO_CALL: only under the old calls)


class WindowLockstep(RadixLockstep):
    EVENTS = RadixLockstep.TREE_EVENTS + WINDOW_EVENTS + (NO_CALL,)
    ALLOC_EVICT = "evict_for_shortfall"  # what evict_to_free_tokens asks of a pure-SWA cache
    LIGHT = False  # the window's reads (cursors, SWA sizes) are whole reads, after every op

    def build_model(self, trace):
        super().build_model(trace)  # the page names, the event ledger, what the checks keep
        return WindowModel(trace.page_size, trace.size, trace.policy, trace.swa_window,
                           self.contract)  # (the release's calls': set by the radix build)

    def build_impl(self, trace, cls, device, poison_keys: bool = True, contract=None):
        from kvfuzz.impl.radix.window import WindowDriver  # imports torch and SGLang

        rows, context = rows_needed(trace)
        return make(WindowDriver, cls, trace.page_size, trace.size, trace.policy,
                    trace.events, rows, context, device, poison_keys, trace.swa_window)

    @handles(Extend)
    def extend(self, op: Extend):
        model, rid = self.model, op.rid
        request = model.requests.get(rid)
        if request is None or request.stale or \
                extend_plan(request, op.count, model.page_size) is None:
            return
        prefill, filled = request.filled < request.prompt, request.filled
        if filled > request.prompt:  # a decode step after the first (decode_batch_idx >= 1)
            yield from self._slide(rid, request)
        problems = yield from RadixLockstep.extend(self, op)
        if problems or not prefill or not self.trace.prefill_aware or request.filled == filled:
            return problems
        self.count(FLOOR)
        yield Call(f"r{rid}.kv.swa_evict_floor = {request.filled} (the chunk's end)",
                   "set_floor", (rid, request.filled))

    def _slide(self, rid: int, request):
        self.count(SLIDES)
        before, model = request.cursor, self.model
        yield Call(f"evict_sliding_windows(r{rid}, {request.filled}) -> window cursor",
                   "slide", (rid,), oracle=lambda: model.slide(rid),
                   compare=lambda expected, rejected, actual, raised:
                   self._cursor_compare(rid, before, expected, actual, raised))
        if request.cursor > max(before, dead_lo(request.protected, request.floor,
                                                model.page_size)):
            self.count(FREES)

    def _cursor_compare(self, rid, before, expected, actual, raised):
        if raised is not None:
            return crash_problems(raised)
        if actual == expected:
            return []
        r = self.model.requests[rid]
        return [("window cursor", f"r{rid}'s window cursor went from {before} to {actual}, "
                                  f"expected {expected} (window {self.model.window}, "
                                  f"{r.filled} tokens held, protected {r.protected}, floor "
                                  f"{r.floor})")]

    def _checkpoint(self, rid: int, request, finishing: bool = False):
        self.model.finishing = finishing  # (the floor cuts only a finish under the old calls)
        limit = self.model.key_limit(request)
        if limit is not None and limit < request.filled:
            self.count(CUT)
        yield from RadixLockstep._checkpoint(self, rid, request, finishing)

    @handles(Checkpoint)
    def checkpoint(self, op: Checkpoint):
        """Under the calls before 0.5.22 a running request is cached (`cache_unfinished_req`)
        only at its prefill's chunks and end, never during its decode (SGLang 0.5.21's
        `stash_chunked_request` and the prefill result's `maybe_cache_unfinished_req`): there
        the call RadixCache's would make caches slots the window already freed. A trace's
        checkpoint of a decoding request is a call that scheduler never made: not made."""
        request = self.model.requests.get(op.rid)
        if self.contract.legacy and request is not None and not request.stale and \
                request.filled > request.prompt:
            self.count(NO_CALL)
            return
        return (yield from RadixLockstep.checkpoint(self, op))

    @handles(Finish)
    def finish_request(self, op: Finish):
        request = self.model.requests.get(op.rid)
        if request is not None and not request.stale and request.cursor > dead_lo(
                request.protected, request.floor, self.model.page_size):
            self.count(SKIPS)
        return (yield from RadixLockstep.finish_request(self, op))

    def more_problems(self, snap, nodes) -> list[tuple[str, str]]:
        problems = []
        reads = snap["swa"]
        for name, locked in (("swa_evictable", False), ("swa_protected", True)):
            problems += [(f"{name}_size", text)
                         for text in size_problems(f"{name}_size", reads[name], nodes, locked)]
        for name, expected in self.model.swa_sizes().items():
            if reads[name] != expected and not problems:
                problems.append((f"{name}_size", f"expected {expected}, actual {reads[name]}"))
        draft, retain = snap["draft_retain"] or (None, None)  # None: no draft window (< 0.5.23)
        # swa_retain_window with a draft's window
        if draft is not None and retain != max(self.model.window, draft):
            problems.append(("swa_retain_window", f"built with window {self.model.window} and "
                             f"draft_swa_window {draft} it keeps {retain}, expected "
                             f"{max(self.model.window, draft)}"))
        for rid, request in self.model.requests.items():
            actual = snap["cursors"].get(rid)
            if not request.stale and actual is not None and actual != request.cursor:
                problems.append(("window cursor", f"r{rid}'s window cursor is {actual}, "
                                                  f"expected {request.cursor}"))
                break
        return problems


class ByWindow(RadixLockstep):
    """The radix target's judge: `WindowLockstep` for a trace with a window, `RadixLockstep`
    for the rest."""

    EVENTS = WindowLockstep.EVENTS

    def __new__(cls, trace, *args, **options):
        if not getattr(trace, "swa_window", 0):
            return super().__new__(cls)
        judge = object.__new__(WindowLockstep)  # not a ByWindow: __init__ is called here
        judge.__init__(trace, *args, **options)
        return judge
