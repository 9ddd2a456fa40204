"""A deterministic fake structured-output (grammar) backend for vLLM's v1 scheduler on the CPU
(`vllm_scheduler.py`, `Workload(structured=share)`): what xgrammar or guidance would supply to
vLLM's own `StructuredOutputManager`, seeded so that a session replays. vLLM's scheduler and
its `StructuredOutputManager` stay unpatched: the manager is given this backend (as if it had
built it for the request's backend name, `grammar_init`) and an executor that "compiles" a
grammar after a seeded number of scheduling steps instead of a thread pool's (whose timing would
not replay).

What it makes the scheduler do (vLLM 0.33.0's scheduler.py; what the KV manager sees):
- a request waits in `WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR` until its grammar compiles: 0 to
  3 steps (`_handle_blocked_waiting_request`): no lookup and no allocation before then;
- one grammar in ten fails to compile: the scheduler finishes the request with an error
  (`grammar_compile_error_reqs`, then `finish_requests(..., FINISHED_ERROR)`) having never
  allocated it;
- the grammar rejects a sampled token with a seeded chance (`accept_tokens` is False: the
  scheduler finishes the request FINISHED_ERROR after appending the token, the model having
  sampled outside the bitmask);
- with speculative decoding, each draft token is valid with a seeded chance and
  `validate_tokens` keeps the drafts before the first invalid one (fewer drafts scheduled, or
  under the asynchronous scheduler, the rest padded with -1 and rejected).
Every draw is a function of (seed, request, position, token), not of a shared stream, so the
bitmask's own trial acceptance of drafts (`grammar_bitmask`, then `rollback`) changes nothing.
`Grammars` counts what happened: requests that waited, compile errors, rejections, drafts
filtered. Importing this module imports no vLLM.
"""

from __future__ import annotations

import random

BACKEND = "kvfuzz-fake"
COMPILE_FAILURES = 0.1   # the share of grammars that fail to compile
REJECTIONS = 0.01        # the chance the grammar rejects a sampled token
INVALID_DRAFTS = 0.3     # the chance a draft token is invalid under the grammar


def _draw(*key) -> float:
    return random.Random(" ".join(map(str, ("kvfuzz grammar",) + key))).random()


def structured_params(rng: random.Random, index: int, share: float):
    """A request's `StructuredOutputsParams`, drawn from `rng` with chance `share` (else
    None): a regex that names its compile steps (0 to 3) and whether it fails, its backend
    resolved to the fake one (as the input processor's `_validate_structured_outputs`
    resolves it)."""
    if not share or rng.random() >= share:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    steps, fails = rng.randint(0, 3), rng.random() < COMPILE_FAILURES
    params = StructuredOutputsParams(regex=f"kvfuzz {index} steps={steps} fails={int(fails)}")
    params._backend = BACKEND
    return params


class Grammars:
    """The session's fake backend and compiler, and what they counted."""

    def __init__(self, seed: int):
        self.seed = seed
        self.waited = self.compile_errors = self.rejections = self.filtered = 0
        self.compiled = 0
        self.deferred = 0  # asynchronous steps whose bitmask waited on the step before's output
        self._pending: list = []  # [steps left, future, fn, args]

    # the executor's side (`StructuredOutputManager.executor.submit`)
    def submit(self, fn, *args):
        from concurrent.futures import Future

        request = args[0]
        steps = int(request.structured_output_request.params.regex.split("steps=")[1][0])
        future = Future()
        self._pending.append([steps, future, fn, args])
        self.waited += steps > 0
        self.tick(advance=False)
        return future

    def tick(self, advance: bool = True) -> None:
        """One scheduling step passed (`advance`): the grammars due compile."""
        left = []
        for entry in self._pending:
            entry[0] -= advance
            if entry[0] > 0:
                left.append(entry)
                continue
            _, future, fn, args = entry
            try:
                future.set_result(fn(*args))
                self.compiled += 1
            except Exception as error:  # noqa: BLE001 - the compile error the scheduler reads
                future.set_exception(error)
                self.compile_errors += 1
        self._pending = left

    def install(self, manager) -> None:
        """`manager` (vLLM's StructuredOutputManager) uses this backend and compiler."""
        manager.backend = _backend_class()(manager.vllm_config, tokenizer=None,
                                           vocab_size=manager.vllm_config.model_config
                                           .get_vocab_size())
        manager.backend.grammars = self
        manager.backend_name = BACKEND
        manager.executor = self
        manager._use_async_grammar_compilation = True

    def count(self, requests) -> None:
        """`rejections`: the requests the scheduler finished with an error whose grammar
        compiled (a rejected sampled token)."""
        self.rejections = sum(
            request.status.name == "FINISHED_ERROR" and request.use_structured_output and
            not isinstance(request.structured_output_request.grammar, Exception)
            for request in requests)

    def scheduled(self, scheduler, output) -> None:
        """After the scheduler's step: one step of compilation passed; the engine's bitmask
        for the step (`get_grammar_bitmask`; deferred under the asynchronous scheduler while
        a structured request has tokens in flight, `after_output`)."""
        self.tick()
        if not getattr(output, "pending_structured_output_tokens", False):
            scheduler.get_grammar_bitmask(output)

    def drafter(self, scheduler):
        """The synchronous sessions' fake drafter, where the scheduler schedules drafts."""
        return Drafter(self) if scheduler.num_spec_tokens else None

    def drafts(self, request_id: str, position: int, count: int) -> list[int]:
        """The fake drafter's `count` drafts for a request at `position` (seeded tokens)."""
        return [3 + int(_draw(self.seed, "drafted", request_id, position, i) * 996)
                for i in range(count)]

    def after_output(self, scheduler, output, ids, samples):
        """Under the asynchronous scheduler, after the output of the step before `output` (a
        queue entry: the step, its request ids, what each samples): if the engine deferred
        it (`pending_structured_output_tokens`), the worker's drafts for it filtered by the
        grammars (`update_draft_token_ids_in_output`: the invalid ones padded with -1, which
        the model then accepts none of), then its bitmask. The entry, with what each request
        may sample."""
        if not output.pending_structured_output_tokens:
            return output, ids, samples
        from vllm.v1.outputs import DraftTokenIds
        from vllm.v1.structured_output.utils import strip_speculative_padding

        self.deferred += 1
        scheduled = output.scheduled_spec_decode_tokens
        drafted = [rid for rid in scheduled if rid in scheduler.requests]
        if drafted:
            proposed = [self.drafts(rid, scheduler.requests[rid].num_tokens, len(scheduled[rid]))
                        for rid in drafted]
            scheduler.update_draft_token_ids_in_output(DraftTokenIds(drafted, proposed), output)
        scheduler.get_grammar_bitmask(output)
        return output, ids, [
            min(sample, 1 + len(strip_speculative_padding(scheduled.get(rid, ())))) if sample
            else 0 for rid, sample in zip(ids, samples)]


class Drafter:
    """The synchronous engine's drafts (its `post_step`): `num_spec_tokens` seeded drafts for
    each request of the step, given to the scheduler (`update_draft_token_ids`, which filters
    them by the grammar); a seeded number of the drafts scheduled accepted at the output."""

    def __init__(self, grammars: Grammars):
        self.grammars = grammars
        self._accepts = random.Random(f"kvfuzz accepted drafts {grammars.seed}")

    def propose(self, scheduler, ids) -> None:
        from vllm.v1.outputs import DraftTokenIds

        live = [rid for rid in ids if rid in scheduler.requests]
        drafts = [self.grammars.drafts(rid, scheduler.requests[rid].num_tokens,
                                       scheduler.num_spec_tokens) for rid in live]
        scheduler.update_draft_token_ids(DraftTokenIds(live, drafts))

    def accepted(self, output, request_id: str) -> list[int]:
        drafts = output.scheduled_spec_decode_tokens.get(request_id, [])
        # a padded admission's rows (`pad_spec_decode`: -1) are no drafts: never accepted
        # (the rejection sampler compares each with the token sampled there)
        drafts = drafts[:next((i for i, token in enumerate(drafts) if token < 0), len(drafts))]
        return list(drafts[:self._accepts.randint(0, len(drafts))])


def plain_drafter(scheduler, seed: int):
    """The fake drafter of a session without structured output (`Workload(drafts=True)`): the
    same seeded drafts and acceptances, no grammar filters them (vLLM's `validate_tokens`
    passes a request without one through)."""
    return Grammars(seed).drafter(scheduler)


def session_grammars(scheduler, workload, seed: int):
    """The fake backend installed in the scheduler's StructuredOutputManager, if the workload
    has structured output (`Workload(structured=share)`)."""
    if not workload.structured:
        return None
    if workload.streaming:
        raise ValueError("Workload(structured=...) with streaming: not driven yet")
    grammars = Grammars(seed)
    grammars.install(scheduler.structured_output_manager)
    return grammars


def admit(scheduler, request) -> None:
    """The engine core's `add_request`: the grammar's compilation started (`grammar_init`)
    before the scheduler is given the request."""
    if request.use_structured_output:
        scheduler.structured_output_manager.grammar_init(request)
    scheduler.add_request(request)


_CLASSES: dict = {}


def _backend_class():
    if _CLASSES:
        return _CLASSES["backend"]
    import torch
    from vllm.v1.structured_output.backend_types import (StructuredOutputBackend,
                                                         StructuredOutputGrammar)

    class FakeGrammar(StructuredOutputGrammar):
        def __init__(self, grammars: Grammars, key: str):
            self.grammars, self.key, self.position = grammars, key, 0

        def _valid(self, position: int, token: int) -> bool:
            return _draw(self.grammars.seed, "draft", self.key, position, token) >= \
                INVALID_DRAFTS

        def accept_tokens(self, request_id, tokens):
            # a sampled token rejected with its chance; a draft (the bitmask's trial) by its
            # validity, as `validate_tokens` judged it
            # (the session counts rejections by the requests finished with an error: the
            # bitmask's trial of a draft may be refused here too, which finishes nothing)
            for token in tokens:
                if _draw(self.grammars.seed, "sampled", self.key, self.position, token) < \
                        REJECTIONS:
                    return False
                self.position += 1
            return True

        def validate_tokens(self, tokens):
            kept = []
            for offset, token in enumerate(tokens):
                if not self._valid(self.position + offset, token):
                    break
                kept.append(token)
            self.grammars.filtered += len(tokens) - len(kept)
            return kept

        def rollback(self, num_tokens):
            self.position -= num_tokens

        def fill_bitmask(self, bitmask, batch_index):
            bitmask[batch_index].fill_(-1)

        def is_terminated(self):
            return False

        def reset(self):
            self.position = 0

    class FakeBackend(StructuredOutputBackend):
        grammars: Grammars = None

        def compile_grammar(self, request_type, grammar_spec, stop_token_ids=None):
            if "fails=1" in grammar_spec:
                raise ValueError(f"kvfuzz fake grammar does not compile: {grammar_spec}")
            return FakeGrammar(self.grammars, grammar_spec)

        def allocate_token_bitmask(self, max_num_seqs):
            return torch.full((max_num_seqs, (self.vocab_size + 31) // 32), -1,
                              dtype=torch.int32)

        def destroy(self):
            pass

    _CLASSES["backend"] = FakeBackend
    return FakeBackend
