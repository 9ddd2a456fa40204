"""The "async connector" profile (`kvmanager/5[async connector]`, a stream of its own: a share of
the mix since 2026-12-06, alone only before; `--profile "async connector"`): a KV connector under
vLLM's asynchronous scheduler, traces shaped as the guarded `ASYNC_CONNECTOR` sessions
(`fuzz/kvmanager/vllm_async.py`; docs/upstream-vllm.md, "A KV connector under vLLM's asynchronous
scheduler, guarded"): the "async outputs" profile's scheduler (`async_outputs.py`: a batch queue of
two, output placeholders, processed outputs, settles) with the "connector" profile's admissions:

- most admissions go through the connector (`connect`): half of them an asynchronous load,
  whose admission schedules no tokens (the request waits, no step of it in flight) and whose
  report (`loaded`: done, failed with a valid prefix, or with none) comes at the start of a
  later scheduling, while other requests' steps are in flight; then its resumption
  (`schedule`, no lookup) or, after a load with nothing valid, an admission through the cache
  again; the rest synchronous loads, whose step is in flight as any admission's. Since
  2026-12-06, in traces with no window (one KV-cache group: vLLM raises on a failed block beside
  several), one in five fails at a block (from draws of its own, after every other draw, so a
  trace where none fails keeps its ops), as the guard maps it: the failure comes with the
  admission step's output, `loaded(rid, n)` beneath the request's next step where one is in
  flight (else after its `processed`), the output skipped (no token) and its placeholder left
  unresolved where it sampled (the request's `ghost`, scheduled past its tokens from then on);
- vLLM sets `defer_block_free` itself (a KV consumer under overlapping batches): a request
  with a step in flight is never preempted (the scheduler's running loop stops there), and an
  abort of one is deferred (`finish` with `defer`: `pop_blocks_for_free`), its blocks released
  (`release`) when that step's output is processed, oldest first; every finish is preceded by
  the connector's `remove_skipped` (`_connector_finished`); aborts during a load too;
- a prompt of one token goes through the connector in half its admissions (since 2026-12-06,
  from draws of its own): loaded whole it counts 0 computed tokens after its load, and its
  next admission goes through the connector again (the scheduler's lookup again, its blocks
  held); a refused prefill chunk is made again after the preemption (`schedule` with `again`,
  as "async outputs"').

Settings: "async outputs"' (a window in 80%, extra retained tokens, retention, the
whole-request check, a watermark, blocks of 1 to 8 tokens, tight pools); where a window is,
blocks zeroed in half (two precisions) with loads of some groups only in three in ten; KV
events and stats in three traces in ten. As there, the block accounting is this module's own
estimate, only to put refusals and preemptions where a tight pool makes them; ops of a request
in another state than estimated resolve to nothing. Standard library only.
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager.async_outputs import _AsyncScheduler, _Request
from kvfuzz.strategies.kvmanager.connector_ops import EVERY_GROUP, Connect, Loaded
from kvfuzz.strategies.kvmanager.trace import Finish, Release, RemoveSkipped, Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "async connector"
FAILS = 0.2  # the synchronous loads that fail at a block (since 2026-12-06)


def build(rng: random.Random, num_ops: int, shaper_class=None, profile: str = PROFILE) -> Trace:
    """`shaper_class` (a subclass of `_AsyncConnected`: "connector cuts"' under this scheduler,
    `connector_cuts.py`) makes the steps with no window (one KV-cache group: block failures)."""
    size = rng.choice((1, 2, 4, 4, 8))
    window = 0 if rng.random() < 0.2 or shaper_class else rng.randint(2, 4 * size)
    blocks = rng.choice((rng.randint(6, 16), rng.randint(16, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(4, 12) * size + rng.randint(0, 3)))
    retention = rng.choice((None, 0, 0) + ((rng.randint(1, 4) * size,) if window else ()))
    fit = rng.random() < 0.5
    budget = max(2, rng.choice((1, 2, 4, 8)) * size)
    in_flight = 2 * budget if rng.random() < 0.7 else \
        rng.choice((None, rng.randint(1, 4 * size)))
    watermark = 0.0 if rng.random() < 0.8 else rng.choice((0.01, 0.1, 0.2))
    retained = rng.randint(1, 2 * size) if window and rng.random() < 0.5 else 0
    zeroing = bool(window) and rng.random() < 0.5
    observed = rng.random() < 0.3
    shaper = (shaper_class or _AsyncConnected)(
        rng, size, window + retained if window else 0, blocks, budget, max_model_len,
        settles=rng.random() < 0.8, zeroing=zeroing)
    shaper.chunk_retries = True  # (since 2026-12-06: `_AsyncScheduler._chunk_refused`)
    for _ in range(20 * num_ops):  # steps make ops, but a stalled pool would not end
        if len(shaper.ops) >= num_ops or not shaper.step():
            break
    return Trace(blocks, size, window, max_model_len, tuple(shaper.ops[:num_ops]), retention,
                 fit, in_flight, watermark, async_scheduling=True, retained=retained,
                 zeroing=zeroing, events=observed, stats=observed, note=f"profile {profile}")


class _AsyncConnected(_AsyncScheduler):
    """The asynchronous scheduler's steps, admissions through a KV connector, frees deferred
    while a step of the request is in flight."""

    failing_share = FAILS  # (a subclass's own: "connector cuts"')

    def __init__(self, rng, size, window, blocks, budget, max_model_len, settles, zeroing):
        super().__init__(rng, size, window, blocks, budget, max_model_len, settles)
        self.zeroing = zeroing
        self.loading: dict[int, list] = {}  # rid: [request, scheduling steps until reported]
        self.deferred: list[tuple[int, int, int]] = []  # (fence step, rid, blocks), oldest first
        self.processed = -1  # the last step whose output was processed
        # Draws of its own (since 2026-12-06), so the traces in which no prompt of one token
        # goes through the connector keep their ops: which of those do
        self.ones = random.Random(f"{size} {window} {blocks} {budget} {max_model_len}")
        # and which synchronous loads fail at a block (since 2026-12-06), drawn after every
        # other draw of the admission: the traces where none fails keep their ops
        self.failing = random.Random(f"failing {size} {window} {blocks} {budget} {max_model_len}")
        self.fails: dict[int, tuple[int, int]] = {}  # rid: (its admission's step, valid tokens)

    def step(self) -> bool:
        self._reported()
        if super().step():
            return True
        if self.loading or self.deferred:  # nothing scheduled: the loads still go on
            self.now += 1
            return True
        return False

    # -- the connector's loads ----------------------------------------------------------------
    def _admit(self, request: _Request, left: int, scheduled: list) -> int | None:
        rng, size, tokens = self.rng, self.size, request.tokens
        if request.computed:  # its load reported (a valid prefix): resumed, no lookup
            chunk = min(len(tokens) - request.computed, left)
            if not self._fits(request, request.computed + chunk, whole=True):
                return None
            self._running(request, request.computed)
            self.ops.append(Schedule(request.rid, left))
            scheduled.append(self._scheduled(request, chunk))
            return chunk
        # A prompt of one token goes through the connector in half its admissions (before
        # 2026-12-06, never): loaded whole, it counts 0 computed tokens after its load, and the
        # scheduler looks it up again (and asks the connector again) with its blocks held
        if rng.random() < 0.25 or (len(tokens) == 1 and self.ones.random() < 0.5):
            return super()._admit(request, left, scheduled)
        hit, load = self._hit(request), rng.random() < 0.5
        external = rng.choice((rng.randint(1, 3) * size + rng.choice((-1, 0, 0, 1)),
                               rng.randint(1, 12), 10**4))
        reserve = rng.choice((0, 0, 0, rng.randint(1, 6))) if load else 0
        written = rng.choice((0, 1, 2)) if load and self.zeroing and rng.random() < 0.3 \
            else EVERY_GROUP
        # what the lock step resolves it to, by our hit: all the rest for a load, all but
        # the last token for a synchronous one
        got = max(0, min(external, len(tokens) - hit - (0 if load else 1)))
        load = load and got > 0
        chunk = 0 if load else min(len(tokens) - hit - got, left)
        if not self._fits(request, hit + got + chunk, whole=True):
            return None
        self.ops.append(Connect(request.rid, 0 if load else left, max(0, external), load,
                                reserve, written))
        if load:  # no step of it: it waits for its load
            self.waiting.remove(request)
            request.computed = hit + got
            self.loading[request.rid] = [request, rng.randint(1, 4), hit]
            return 0
        self._running(request, hit + got)
        scheduled.append(self._scheduled(request, chunk))
        # a block of it fails: the first valid ones; with one KV-cache group only, as vLLM
        # refuses a failed block beside several (`_handle_invalid_blocks` raises)
        if got and not self.window and self.failing.random() < self.failing_share:
            self.fails[request.rid] = (self.now, self.failing.randrange(
                hit // size, -(-(hit + got) // size)) * size)
        return chunk

    def _reported(self) -> None:
        """Loads reported with an output: the next scheduling's `_update_waiting_for_remote_kv`
        (done, or failed with a valid prefix or none), before any allocation."""
        for rid, entry in list(self.loading.items()):
            entry[1] -= 1
            if entry[1] > 0:
                continue
            request, _, hit = self.loading.pop(rid)
            valid = -1 if self.rng.random() < 0.6 else \
                self.rng.choice((0, self.rng.randint(1, 3) * self.size))
            self.ops.append(Loaded(rid, valid))
            if valid >= 0:  # cut to a block, at or past the hit (the lock step's rule)
                valid = max(hit // self.size * self.size,
                            min(valid, request.computed) // self.size * self.size)
                request.computed = valid
            full = request.computed // self.size * self.size
            for end in range(self.size, full + 1, self.size):
                self.cached.add(tuple(request.tokens[:end]))
            if request.computed == len(request.tokens):  # its last token computed again
                request.computed -= 1
            request.held = False
            self.waiting.insert(0, request)

    # -- frees deferred under overlapping batches ---------------------------------------------
    def _in_flight(self, request: _Request) -> bool:
        return request.last > self.processed

    def _can_preempt(self, request: _Request) -> bool:
        """vLLM's `_request_blocks_can_be_freed`: "a deferred free will not help"."""
        return not self._in_flight(request)

    def _abort(self, request: _Request) -> None:
        self.ops.append(RemoveSkipped(request.rid))
        if not self._in_flight(request):
            self.ops.append(Finish(request.rid))
            return
        # freed once the newest step scheduled is processed (the scheduler's fence)
        self.ops.append(Finish(request.rid, defer=True))
        self.deferred.append((self.queue[-1][0], request.rid, self._blocks(request.computed)))

    def _between_steps(self) -> None:
        super()._between_steps()
        if self.loading and self.rng.random() > 0.97:  # an abort during a load
            rid = self.rng.choice(sorted(self.loading))
            del self.loading[rid]
            self.ops += [RemoveSkipped(rid), Finish(rid)]

    def _process(self, step: int, scheduled: list) -> None:
        """The step's output: the deferred frees it fences released first
        (`_drain_deferred_frees`), then its tokens; every finish after the connector's
        `remove_skipped`."""
        self.processed = step
        while self.deferred and self.deferred[0][0] <= step:
            self.ops.append(Release(self.deferred.pop(0)[1]))
        scheduled = [entry for entry in scheduled if not self._failed(step, *entry)]
        before = len(self.ops)
        super()._process(step, scheduled)
        ops = self.ops[before:]
        del self.ops[before:]
        for op in ops:
            if isinstance(op, Finish):
                self.ops.append(RemoveSkipped(op.rid))
            self.ops.append(op)

    def _failed(self, step: int, request: _Request, epoch: int, samples: bool) -> bool:
        """Whether the output of `step` reports a failed block of the request's synchronous
        load (its admission's step): vLLM cuts its computed tokens to that block, keeps a step
        of it scheduled since in flight, and skips this output (`update_from_output`): no
        token, its output placeholder never resolved (the request's `ghost`, scheduled past
        its tokens from then on). `loaded(rid, valid)`: beneath its next step where one is in
        flight, else after its `processed` (nothing of it in flight)."""
        admitted, valid = self.fails.get(request.rid, (None, 0))
        if admitted != step or request.epoch != epoch or request not in self.running:
            return False
        del self.fails[request.rid]
        # nothing of it scheduled since: its output processed (a pipeline's: the steps to it)
        self._output_processed(request, step)
        self.ops.append(Loaded(request.rid, valid))
        request.computed = valid
        if samples:
            request.pending -= 1
            request.ghost = 1
        return True

    def _fits(self, request: _Request, tokens: int, whole: bool = False) -> bool:
        """As the scheduler's estimate, with the blocks of loads in flight and of frees not
        yet released held too."""
        held = sum(self._blocks(r.computed) for r, _, _ in self.loading.values()) + \
            sum(blocks for _, _, blocks in self.deferred)
        if whole:
            need = self._blocks(max(tokens, len(request.tokens)))
        else:
            need = self._blocks(request.computed + tokens)
        running = sum(self._blocks(r.computed) for r in self.running if r is not request)
        return running + held + need <= self.blocks - 1


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[async connector]", build, num_ops=200, max_fuzz_ops=200)
