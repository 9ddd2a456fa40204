"""Stateful differential for KV-cache managers: drives the oracle (`oracle.kvmanager`) and an
implementation with the same trace, as vLLM's scheduler does (admission through the prefix
cache, chunked prefill, decode, preemption, finish), and compares after every op: the hit
(blocks per group, hit tokens, shared-prefix boundary), allocate_slots' result (None, or the new
blocks per group), that a successful allocation consumed exactly the blocks its check counted,
every live request's block table per group, and the whole pool (`fuzz.blockpool.pool_state.
pool_problems`: free queue order and links, reference counts, hashes, the hash map, invariants).
Every call into the implementation is guarded: whatever it raises is a problem to report.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.blockpool.pool_state import pool_problems
from kvfuzz.fuzz.lockstep_calls import crash_problems, guarded, short
from kvfuzz.impl.kvmanager.driver import KVManagerDriver
from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.kvmanager.hashing import chain_from
from kvfuzz.strategies.kvmanager.trace import (Arrive, Decode, Evict, Finish, Preempt, Reset,
                                               Schedule, Trace)

WAITING, RUNNING = "waiting", "running"


class _Request:
    def __init__(self, tokens):
        self.tokens, self.computed, self.status = list(tokens), 0, WAITING
        self.prompt = len(self.tokens)
        self.boundary = 0  # the shared-prefix boundary of its last lookup (the scheduler keeps it)
        self._hashes: list[int] = []

    def hashes(self, block_size: int) -> list[int]:
        """The block hashes of every full block so far, extended as tokens come (as vLLM's
        request does): rehashing every token on every step is quadratic in a long request."""
        done = len(self._hashes) * block_size
        if len(self.tokens) - done >= block_size:
            # The chain restarts from the last known hash: hash the new blocks only.
            full = (len(self.tokens) // block_size) * block_size
            self._hashes += chain_from(self._hashes[-1] if self._hashes else None,
                                       self.tokens[done:full], block_size)
        return self._hashes


class Lockstep:
    """The oracle and one implementation side by side; `step(op)` returns the problems found."""

    def __init__(self, trace: Trace, cls, device: str = "cpu"):
        self.trace = trace
        self.model = KVManagerModel(trace.blocks, trace.block_size, trace.window,
                                    trace.max_model_len, trace.retention,
                                    trace.max_in_flight_tokens, trace.watermark)
        self.requests: dict[int, _Request] = {}
        self.seen: set[int] = set()
        self.log: list[str] = []
        self.events: Counter = Counter()
        self.impl, raised = guarded(KVManagerDriver, cls, trace.blocks, trace.block_size,
                                    trace.window, trace.max_model_len, trace.retention,
                                    trace.max_in_flight_tokens, trace.watermark)
        self.broken = crash_problems(raised, "constructor") if raised else []
        if not self.broken:
            self.broken = pool_problems(self.impl, self.model.pool, "constructor")

    def step(self, op) -> tuple[str | None, list[tuple[str, str]]]:
        if self.broken:
            return None, self.broken
        run = self._resolve(op)
        if run is None:
            return None, []
        text, problems = run()
        self.log.append(text)
        return text, problems or self._state()

    def _resolve(self, op):
        """A function running `op` on both sides, returning (text, problems); or None."""
        request = self.requests.get(getattr(op, "rid", None))
        if isinstance(op, Arrive):
            if op.rid in self.seen or len(op.tokens) > self.trace.max_model_len:
                return None
            return lambda: self._arrive(op)
        if isinstance(op, Schedule) and request is not None:
            if request.status == WAITING:
                return lambda: self._admit(op.rid, request, op.chunk)
            pending = len(request.tokens) - request.computed
            if pending > 0:
                return lambda: self._allocate(op.rid, request, min(op.chunk, pending))
            return None
        if isinstance(op, Decode) and request is not None:
            if request.status != RUNNING or request.computed < len(request.tokens) \
                    or len(request.tokens) >= self.trace.max_model_len:
                return None
            return lambda: self._decode(op.rid, request, op.token)
        if isinstance(op, (Preempt, Finish)) and request is not None:
            if isinstance(op, Preempt) and request.status != RUNNING:
                return None
            return lambda: self._free(op.rid, request, finish=isinstance(op, Finish))
        if isinstance(op, Evict):
            ids = sorted({b for b in op.block_ids if b < self.trace.blocks})
            return lambda: self._simple(f"evict_blocks({set(ids) or '{}'})", "evict_blocks",
                                        (ids,), "evict")
        if isinstance(op, Reset):
            return lambda: self._simple("reset_prefix_cache()", "reset_prefix_cache", (),
                                        "reset")
        return None

    def _call(self, method: str, *args):
        return guarded(getattr(self.impl, method), *args)

    def _arrive(self, op):
        self.seen.add(op.rid)
        self.requests[op.rid] = _Request(op.tokens)
        _, raised = self._call("arrive", op.rid, op.tokens)
        self.events["arrive"] += 1
        return f"r{op.rid} arrives ({len(op.tokens)} tokens)", \
            crash_problems(raised) if raised else []

    def _hashes(self, request: _Request) -> list[int]:
        return request.hashes(self.trace.block_size)

    def _admit(self, rid: int, request: _Request, chunk: int):
        model = self.model
        expected = model.get_computed_blocks(self._hashes(request), len(request.tokens))
        actual, raised = self._call("get_computed_blocks", rid)
        text = f"get_computed_blocks(r{rid}) -> {short(expected, 60)}"
        if raised:
            return text, crash_problems(raised)
        if list(actual) != list(expected):
            return text, _hit_problems(expected, actual)
        hit_blocks, hit, request.boundary = expected
        self.events["admission with a hit" if hit else "admission, no hit"] += 1
        new = min(chunk, len(request.tokens) - hit)
        text += f"; allocate_slots(r{rid}, {new}, hit {hit})"
        problems = self._allocation(rid, request, new, hit, hit_blocks)
        return text, problems

    def _allocate(self, rid: int, request: _Request, new: int):
        self.events["prefill chunk"] += 1
        return f"allocate_slots(r{rid}, {new})", self._allocation(rid, request, new, 0, None)

    def _decode(self, rid: int, request: _Request, token: int):
        request.tokens.append(token)
        _, raised = self._call("append_token", rid, token)
        if raised:
            return f"r{rid} samples {token}", crash_problems(raised)
        self.events["decode"] += 1
        if len(request.tokens) % self.trace.block_size == 1 or self.trace.block_size == 1:
            self.events["decode into a new block"] += 1
        return f"r{rid} samples {token}; allocate_slots(r{rid}, 1)", \
            self._allocation(rid, request, 1, 0, None)

    def _allocation(self, rid, request, new, hit, hit_blocks) -> list[tuple[str, str]]:
        model = self.model
        before, raised = self._call("num_free")
        if raised:
            return crash_problems(raised, "state read")
        admission = hit_blocks is not None
        whole = admission and self.trace.full_sequence_must_fit
        others = any(r.status == RUNNING for other, r in self.requests.items() if other != rid)
        expected = model.allocate_slots(rid, self._hashes(request), len(request.tokens),
                                        request.computed, new, hit, hit_blocks, whole,
                                        request.prompt, request.boundary, others)
        actual, raised = self._call("allocate_slots", rid, new, hit, admission, whole, others)
        if raised:
            return crash_problems(raised)
        if model.freed_by_window:
            self.events["window frees blocks"] += 1
        if expected is None:
            self.events["allocate_slots refused: the whole request does not fit"
                        if model.refused_whole else "allocate_slots refused"] += 1
            if actual is not None:
                return [("None vs success", f"expected None ({model.predicted} blocks needed, "
                                            f"{model.pool.num_free()} free), actual "
                                            f"{short(actual)}")]
            return []
        self.events["allocate_slots ok"] += 1
        if actual is None:
            return [("None vs success", f"expected {short(expected)} ({model.predicted} blocks "
                                        f"needed, {model.pool.num_free() + model.predicted} "
                                        f"free), actual None")]
        if actual != expected:
            return [("result", f"allocate_slots: new blocks per group: expected "
                               f"{short(expected)}, actual {short(actual)}")]
        after, raised = self._call("num_free")
        if raised:
            return crash_problems(raised, "state read")
        consumed = before + model.freed_by_window - after
        if consumed != model.predicted:
            return [("invariant", f"allocate_slots consumed {consumed} free blocks, its check "
                                  f"counted {model.predicted}")]
        request.computed += hit + new
        request.status = RUNNING
        _, raised = self._call("set_computed", rid, request.computed, RUNNING)
        return crash_problems(raised) if raised else []

    def _free(self, rid: int, request: _Request, finish: bool):
        self.model.free(rid)
        _, raised = self._call("free", rid)
        self.events["finish" if finish else "preempt"] += 1
        if finish:
            del self.requests[rid]
            self._call("forget", rid)
        else:
            request.computed, request.status = 0, WAITING
            raised = raised or self._call("set_computed", rid, 0, "preempted")[1]
        return f"free(r{rid}){'' if finish else ': preempted'}", \
            crash_problems(raised) if raised else []

    def _simple(self, text: str, method: str, args, event: str):
        expected = getattr(self.model, method)(*args)
        actual, raised = self._call(method, *args)
        self.events[event if expected is not False else f"{event} refused"] += 1
        if raised:
            return text, crash_problems(raised)
        if method == "reset_prefix_cache" and actual != expected:
            return text, [("result", f"reset_prefix_cache: expected {expected}, actual "
                                     f"{short(actual)}")]
        return text, []

    def _state(self) -> list[tuple[str, str]]:
        problems = []
        for rid in self.requests:
            tables, raised = self._call("block_ids", rid)
            if raised:
                return crash_problems(raised, "state read")
            expected = self.model.block_ids(rid)
            if tables != expected:
                problems.append(("block table", f"r{rid}: expected {short(expected)}, actual "
                                                f"{short(tables)}"))
                break
        return problems + pool_problems(self.impl, self.model.pool, "state read")


def _hit_problems(expected, actual) -> list[tuple[str, str]]:
    try:
        blocks, hit, boundary = actual
    except (TypeError, ValueError):
        return [("prefix hit", f"expected (blocks per group, hit tokens, boundary), actual "
                               f"{short(actual)}")]
    if hit != expected[1] or blocks != expected[0]:
        return [("prefix hit", f"expected {expected[1]} tokens, blocks {short(expected[0])}; "
                               f"actual {hit} tokens, blocks {short(blocks)}")]
    return [("shared prefix boundary", f"expected {expected[2]}, actual {boundary}")]
