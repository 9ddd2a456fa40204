"""The "sync drafts" profile (`kvmanager/5[sync drafts]`, a stream of its own, a share of the mix):
traces shaped as vLLM 0.33.0's synchronous `Scheduler` makes its calls with speculative decoding,
k draft tokens a step (EAGLE or MTP), as the guard's `SPEC_DRAFTS` sessions record them
(docs/upstream-vllm.md, "Draft tokens under vLLM's synchronous scheduler, guarded"), so the
lock step's synchronous draft step (`fuzz/kvmanager/sync_draft_ops.py`) comes from kvfuzz's own
generator too:

- a decoding request's step is its last sampled token and k drafts (`schedule` with `drafts`:
  `allocate_slots(request, 1 + k)` from `num_tokens - 1`), fewer where the step's budget or
  max_model_len leaves less (the scheduler's caps; requests run up to max_model_len - 1
  tokens), nothing in flight;
- each output appends the token and the drafts the fake model accepted (0 to all, uniform),
  trimmed at the request's last output (`sample`s), then `settle` with `rejected`: the
  rejected drafts and the trimmed tokens rolled back before the scheduler's `cache_blocks`; a
  request done at an output finishes there;
- an admission whose estimated hit leaves one token, with no prefill chunk in the step and a
  running request scheduled or a hit, is padded (`schedule` with `pad` k): the rows are
  rejected at its output (the lock step rolls them back at once, as the synchronous guard
  maps them), in 60% one or two earlier prompts come again cut one token past a block's end so
  that such hits happen; preemptions before a step, no stale output (nothing is in flight).

The engine's settings and the scheduler's shape are the "async drafts" profile's
(`async_drafts.py`: EAGLE with lookahead hashes of one token, or its last-block drop; MTP of 2
to 4 tokens with lookahead hashes and prefill lookahead of k, or the drop; k lookahead slots on
every allocation), with a batch queue of one: each step's output processed before the next is
scheduled. Standard library only.
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager.async_drafts import _DraftScheduler, draft_settings
from kvfuzz.strategies.kvmanager.trace import Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "sync drafts"


def build(rng: random.Random, num_ops: int) -> Trace:
    # (the room for one step's drafts and tokens in flight: nothing is in flight between steps)
    d = draft_settings(rng, 1)
    k, mtp = d["k"], d["mtp"]
    shaper = _SyncDraftScheduler(rng, d["size"], d["window"], d["blocks"], d["budget"],
                                 d["max_model_len"], k, d["extra"], d["hashed"],
                                 k - 1 if mtp else 0, d["drop"])
    shaper.chunk_retries = True
    for _ in range(20 * num_ops):  # steps make ops, but a stalled pool would not end
        if len(shaper.ops) >= num_ops or not shaper.step():
            break
    return Trace(d["blocks"], d["size"], d["window"], d["max_model_len"],
                 tuple(shaper.ops[:num_ops]), d["retention"], d["fit"], d["in_flight"],
                 d["watermark"], lookahead=k, eagle=d["drop"], hash_lookahead=d["hashed"],
                 prefill_lookahead=k if mtp else 0, note=f"profile {PROFILE}")


class _SyncDraftScheduler(_DraftScheduler):
    """"async drafts"' scheduler with a batch queue of one (each step's output processed before
    the next step: nothing in flight, no `processed`, no stale output) and the synchronous
    draft step: `schedule` with `drafts` from the request's last token."""

    queue_size = 1

    def __init__(self, rng, size: int, window: int, blocks: int, budget: int,
                 max_model_len: int, k: int, extra: int, ahead: int, held_back: int,
                 drop: bool):
        # requests of up to max_model_len - 1 tokens (the base sizes them 2k + 5 short of it,
        # for the drafts of a step in flight): the last steps then get fewer drafts, as the
        # scheduler's cap gives them
        super().__init__(rng, size, window, blocks, budget, max_model_len + 2 * k + 4, k, extra,
                         ahead, held_back, drop)
        self.max_model_len = max_model_len

    def _next(self, request, left: int):
        """A running request's op this step, its new tokens and drafts: the prompt's next
        chunk; else its last token and `new - 1` drafts (`1 + k` capped by the budget and by
        max_model_len less the sampled token)."""
        if not request.spec:
            chunk = min(len(request.tokens) - request.computed, left)
            return Schedule(request.rid, chunk), chunk, 0
        new = min(1 + self.k, left, self.max_model_len - request.computed - 1)
        if new < 1 or request.computed != len(request.tokens) - 1:
            return None, 0, 0
        return Schedule(request.rid, new, drafts=new - 1), new, new - 1

    def _admit(self, request, left: int, scheduled: list) -> int | None:
        """"async drafts"' admission, its padded rows rolled back at once (the synchronous
        lock step's, as the guard maps them): the output's `settle` rolls back nothing of
        them."""
        made = self._admission(request, left)
        if made is None:
            return None
        chunk, rows = made
        self.ops.append(Schedule(request.rid, left, pad=rows))
        entry = self._scheduled(request, chunk, 0)
        request.computed -= rows
        scheduled.append(entry)
        return chunk

    def _scheduled(self, request, new: int, drafts: int, rows: int = 0) -> tuple:
        entry = super()._scheduled(request, new, drafts, rows)
        request.held = False  # nothing in flight: no `processed`
        return entry


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[sync drafts]", build, num_ops=200, max_fuzz_ops=200)
