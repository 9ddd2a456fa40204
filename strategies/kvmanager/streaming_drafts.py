"""The "streaming drafts" profile (`kvmanager/5[streaming drafts]`, a stream of its own): the
"streaming" profile's resumable (streaming-input) requests under vLLM's synchronous scheduler
with speculative decoding, shaped as the guard's `replace(STREAMING, speculative=...)` sessions
(docs/upstream-vllm.md, "Streaming input (resumable requests), guarded": its speculative
paragraph), so the lock step's synchronous `stream` with `discard` and the hash a stop keeps
over its discarded token (`fuzz/kvmanager/streaming.py`) come from kvfuzz's own generator:

- k draft slots on every allocation (`lookahead`), every `schedule` carrying `pad` k (the lock
  step pads a waiting request's step of one token as the scheduler's `pad_spec_decode` does);
  the fake model proposes no drafts, so a step computes one token;
- the scheduler's `cache_blocks` after every output (`num_spec_tokens > 0`, scheduler.py
  2405-2415): each output is a `sample` of the token and a `settle`, and the next step a
  `schedule` of one token, as the guard's recordings have them; a request's end is its last
  output's `sample` and `settle`, then the `finish`;
- a session's stop comes after that output too, so the trace has the token the stop discards:
  `stream(rid, tokens, discard=True)` (its update queued at the stop) or `stream(rid,
  discard=True)` and, 1 to 3 steps later, `stream(rid, tokens)`;
- in 6 traces of 10, about a third of the updates carry images (`Stream.images`: a
  multimodal model's `StreamingUpdate.mm_features`), whose keys go into the hashes of the
  blocks they lie in, drawn after everything else;
- the engine's settings as the guard's speculative sessions have them: EAGLE with lookahead
  hashes of one token (vLLM's default: the hash of a block covers the token after it, so a
  stop's discarded token may complete one, which the update keeps until a lookup after a
  preemption makes the hashes again), or its last-block drop without them; MTP of 2 or 3
  tokens with lookahead hashes and prefill lookahead of k, or the drop.

Everything else is the "streaming" profile's (`streaming_input.py`: its sessions, prefix
families, preemptions of running requests only, its block estimate, with the k draft slots
counted). Drawn from the same `rng` after the settings: a new stream, so no other profile's
traces change. Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import streaming_input
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import Finish, Preempt, Sample, Schedule, Settle, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "streaming drafts"
MODES = ("eagle", "eagle", "eagle", "eagle drop", "mtp", "mtp drop")


def build(rng: random.Random, num_ops: int) -> Trace:
    mode = rng.choice(MODES)
    mtp, drop = mode.startswith("mtp"), mode.endswith("drop")
    k = rng.choice((2, 3)) if mtp else rng.choice((1, 2, 2, 3))
    # MTP's blocks hold its k tokens (vLLM refuses a smaller scheduler block with the drop)
    size = rng.choice([s for s in (1, 2, 4, 4, 8, 16) if not mtp or s >= k])
    window = rng.randint(2, 4 * size) if rng.random() < 0.3 else 0
    extra = -(-(k + 1) // size)  # the draft slots' blocks, beside the requests' own
    blocks = extra + rng.choice((rng.randint(6, 16), rng.randint(16, 48)))
    budget = max(1 + k, rng.choice((1, 2, 4, 8)) * size)  # a padded step of 1 + k fits
    fit = rng.random() < 0.8
    watermark = 0.0 if rng.random() < 0.85 else rng.choice((0.01, 0.1))
    ahead = 0 if drop else (k if mtp else 1)
    shaper = _DraftSessions(rng, size, window, blocks, budget, k, ahead, drop)
    for _ in range(20 * num_ops):  # steps make ops, but a stalled pool would not end
        if len(shaper.ops) >= num_ops or not shaper.step():
            break
    ops = tuple(replace(op, pad=k) if isinstance(op, Schedule) else op
                for op in shaper.ops[:num_ops])
    ops = with_update_images(rng, ops)  # (drawn last: the rest of the trace as without them)
    return Trace(blocks, size, window, 1024, ops, full_sequence_must_fit=fit,
                 max_in_flight_tokens=budget, watermark=watermark, lookahead=k, eagle=drop,
                 hash_lookahead=ahead, prefill_lookahead=k if mtp else 0,
                 note=f"profile {PROFILE}")


IMAGES = ("img-a", "img-b", "img-c")  # few: equal updates carry equal images, and hit


def with_update_images(rng: random.Random, ops: tuple) -> tuple:
    """`ops` with images on about a third of the streaming updates (`Stream.images`: 1 or 2
    placeholders among the update's tokens, sorted and apart, from a few identifiers), as a
    multimodal model's streaming input sends them; none in 4 traces of 10."""
    if rng.random() < 0.4:
        return ops
    made = []
    for op in ops:
        if isinstance(op, Stream) and op.tokens and rng.random() < 0.35:
            images, at = [], 0
            for _ in range(rng.randint(1, 2)):
                if at >= len(op.tokens):
                    break
                offset = rng.randint(at, len(op.tokens) - 1)
                length = rng.randint(1, len(op.tokens) - offset)
                images.append((rng.choice(IMAGES), offset, length))
                at = offset + length
            op = replace(op, images=tuple(images))
        made.append(op)
    return tuple(made)


class _DraftSessions(streaming_input._Scheduler):
    """The "streaming" profile's scheduler with k draft slots an allocation and the caching
    after every output (`sample`, `settle`) before any stop."""

    def __init__(self, rng, size: int, window: int, blocks: int, budget: int, k: int,
                 ahead: int, drop: bool):
        self.k, self.ahead, self.drop = k, ahead, drop
        super().__init__(rng, size, window, blocks - -(-(k + 1) // size), budget)
        self.blocks = blocks  # (the requests sized without the drafts' room: `longest`)

    def _run_running(self, left: int) -> int:
        """The running requests' steps: a prefill chunk or one token (its output sampled at the
        last step already), each a `schedule`, with k draft slots."""
        self.preempted = False
        for request in list(self.running):
            if request not in self.running or left <= 0:
                continue
            need = self._room(request, left)
            if need is None:
                continue
            self.ops.append(Schedule(request.rid, need))
            request.computed += need
            left -= need
        return left

    def _sample(self) -> None:
        """Each running request whose tokens are all computed samples a token, cached after
        the output (`sample`, `settle`); at its segment's last output a resumable one stops and
        discards it (`stream` with `discard`), any other ends."""
        for request in list(self.running):
            if request.computed < len(request.tokens):
                continue
            token = self.rng.randrange(streaming_input.VOCAB)
            self.ops += [Sample(request.rid, token), Settle(request.rid)]
            if not request.done:
                request.tokens.append(token)
                continue
            self.running.remove(request)
            if not request.resumable or (not request.updates and self.rng.random() < 0.6):
                self.ops.append(Finish(request.rid))  # its end queued at the stop
            elif request.updates and self.rng.random() < 0.4:
                new, more = request.updates.pop(0)  # its update queued: taken at the stop
                request.tokens += new
                request.prompt, request.outputs = len(request.tokens), more
                self.ops.append(Stream(request.rid, tuple(new), discard=True))
                self.holding.append(request)
            else:
                self.ops.append(Stream(request.rid, discard=True))  # it waits for an update
                request.paused, request.update_at = True, self.now + self.rng.randint(1, 3)
                self.paused.append(request)

    def _preempt(self, request) -> None:
        # (its last output's token is in the trace already: the `sample` before its `settle`)
        self.running.remove(request)
        self.ops.append(Preempt(request.rid))
        self.preempted = True
        request.computed = 0
        self.waiting.insert(0, request)

    def _hit(self, request) -> int:
        """Our estimate: whole blocks another request computed whose hash exists (with
        lookahead hashing, the tokens it covers past the block too), EAGLE's drop taking the
        last block off, the last token never a hit."""
        held = [r.tokens[:r.computed] for r in (*self.running, *self.holding, *self.paused)]
        hit, span = 0, self.size + self.ahead
        while hit + span < len(request.tokens) and any(
                len(tokens) >= hit + span and tokens[:hit + span] == request.tokens[:hit + span]
                for tokens in held):
            hit += self.size
        return max(0, hit - self.size) if self.drop and hit else hit

    def _fits(self, request, tokens: int, whole: bool = False) -> bool:
        need = self._blocks((max(tokens, len(request.tokens)) if whole else
                             request.computed + tokens) + self.k)
        held = sum(self._blocks(r.computed + self.k) for r in
                   (*self.running, *self.holding, *self.paused) if r is not request)
        return held + need <= self.blocks - 1


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[streaming drafts]", build, num_ops=200,
                           max_fuzz_ops=200)
