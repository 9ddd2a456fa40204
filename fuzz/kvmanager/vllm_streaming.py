"""Streaming-input sessions for `vllm_scheduler.run_session` (`Workload(streaming=share)`): that
share of the session's requests are vLLM's resumable requests (`Request.resumable`), each fed
1 to `Workload.max_updates` streaming updates and then its end, as a client of vLLM's
streaming input sends them (`Scheduler.add_request` of a request of the same id: its
`StreamingUpdate`, or None where the new request is not resumable).

A request that stops waits for its next update (`WAITING_FOR_STREAMING_REQ`), which comes 0
to 2 steps later; or the update was sent while the request ran, queued, and the stop takes it
at once (`streaming_queue`). Updates carry 1 to 48 new prompt tokens and up to
`Workload.max_tokens` tokens to sample; all drawn from a stream of the session's seed of their
own (the session's other requests stay as they were).
"""

from __future__ import annotations

import random

MAX_UPDATE_TOKENS = 48
STALLED_STEPS = 20  # steps with nothing scheduled before a paused or starved session is ended


class StreamingInputs:
    """The updates of a session's resumable requests, sent as their steps come."""

    def __init__(self, seed: int, workload, requests):
        self.rng = random.Random(f"streaming {seed}")
        self.workload = workload
        # request id -> the updates it has left (a list of (tokens, max_tokens); None: its end)
        self.left: dict[str, list] = {}
        self.due: list[tuple[int, str]] = []  # (step, request id) of updates sent later
        self.updates = self.pauses = self.queued = self.ended_stalled = 0
        self.idle = 0
        for request in requests:
            if self.rng.random() < workload.streaming:
                request.resumable = True
                self.left[request.request_id] = [
                    ([self.rng.randrange(3, 1000)
                      for _ in range(self.rng.randint(1, MAX_UPDATE_TOKENS))],
                     self.rng.randint(1, workload.max_tokens))
                    for _ in range(self.rng.randint(1, workload.max_updates))] + [None]

    def before_step(self, scheduler, step: int) -> None:
        """The updates due now sent; a running session's next one sometimes sent early (the
        stop then takes it from the request's queue)."""
        from vllm.v1.request import RequestStatus

        for when, name in [due for due in self.due if due[0] <= step]:
            self.due.remove((when, name))
            self._send(scheduler, name)
        for name in list(self.left):
            request = scheduler.requests.get(name)
            if request is not None and request.status == RequestStatus.RUNNING and \
                    not request.streaming_queue and not self._pending(name) and \
                    self.rng.random() < 0.03:
                self.queued += 1
                self._send(scheduler, name)

    def after_step(self, scheduler, step: int, scheduled: int) -> None:
        """Each session that stopped and waits: its next update due 0 to 2 steps on. A session
        with nothing scheduled for `STALLED_STEPS` steps (resumed sessions holding every block,
        none running) is ended: a client's abort."""
        from vllm.v1.request import RequestStatus

        for name in list(self.left):
            request = scheduler.requests.get(name)
            if request is not None and \
                    request.status == RequestStatus.WAITING_FOR_STREAMING_REQ and \
                    not self._pending(name):
                self.pauses += 1
                self.due.append((step + self.rng.randint(0, 2), name))
        self.idle = 0 if scheduled else self.idle + 1
        if self.idle >= STALLED_STEPS and not scheduler.running:
            waiting = [name for name in self.left if name in scheduler.requests]
            if waiting:
                self.ended_stalled += 1
                scheduler.finish_requests(waiting[0], RequestStatus.FINISHED_ABORTED)
                self.left.pop(waiting[0])
                self.idle = 0

    def waiting(self, scheduler) -> bool:
        """Whether a live session has updates left to send."""
        return any(name in scheduler.requests for name in self.left)

    def _pending(self, name: str) -> bool:
        return any(due == name for _, due in self.due)

    def _send(self, scheduler, name: str) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        if not self.left.get(name) or name not in scheduler.requests:
            return
        update = self.left[name].pop(0)
        if update is None:
            self.left.pop(name)
            tokens, max_tokens, resumable = [0], 1, False
        else:
            (tokens, max_tokens), resumable = update, True
            self.updates += 1
        scheduler.add_request(Request(
            name, prompt_token_ids=tokens, pooling_params=None, resumable=resumable,
            sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True)))
