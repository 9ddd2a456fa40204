"""Mutants handed out to `kvfuzz mutate`'s workers, one at a time each, with a progress line every
ten seconds; a worker that dies or hangs costs its mutant alone and is replaced by a new one,
planned from the same request."""

from __future__ import annotations

import time
from multiprocessing.connection import wait

from kvfuzz.fuzz.engine.mutation.supervisor import MutationError, Zygote, wait_plan
from kvfuzz.fuzz.engine.stop_signals import INTERRUPTED

PROGRESS_EVERY = 10.0  # seconds between progress lines


def hand_out(pending, zygotes, request, finish, options, timeout, began, results, out) -> int:
    """`pending` mutants to `options.jobs` workers (`zygotes` holds those planned already; more,
    and replacements, are planned from `request`); `finish(mutant, result)` records each."""
    pending = list(pending)
    for _ in range(min(options.jobs, len(pending)) - len(zygotes)):
        zygotes.append(Zygote(request))
    for zygote in zygotes:
        if zygote.planned is None:
            wait_plan(zygote)
    idle, last, total = list(zygotes), time.monotonic(), len(pending)

    def done_with(zygote, result: dict) -> None:
        finish(zygote.mutant, result)
        zygote.mutant = None
        idle.append(zygote)

    try:
        while pending or len(idle) < len(zygotes):
            over = options.time is not None and time.monotonic() - began > options.time
            while idle and pending and not over:
                zygote = idle.pop()
                zygote.give(pending.pop(0), timeout)
            if over and len(idle) == len(zygotes):
                print(f"mutate: --time reached; {len(pending)} mutants not run (rerun to "
                      f"resume)", file=out)
                break
            busy = [z for z in zygotes if z not in idle]
            wait([z.conn for z in busy] + [z.process.sentinel for z in busy], 0.5)
            for zygote in busy:
                _collect(zygote, zygotes, idle, done_with, request)
            if time.monotonic() - last > PROGRESS_EVERY:
                last = time.monotonic()
                print(f"mutate: {total - len(pending) - (len(zygotes) - len(idle))}/{total} "
                      f"run, {time.monotonic() - began:.0f} s", file=out)
    except KeyboardInterrupt:
        print(f"mutate: interrupted; {len(pending) + len(zygotes) - len(idle)} mutants not "
              f"run; the same command resumes from {results.path}", file=out)
        return INTERRUPTED
    return 0


def _collect(zygote, zygotes, idle, finish, request) -> None:
    """What a busy worker said, or how it ended (its mutant's record; a new worker after)."""
    dead = zygote.dead()
    for message in zygote.take():
        if message[0] == "result" and zygote.mutant is not None and \
                message[1] == zygote.mutant.id and isinstance(message[2], dict):
            finish(zygote, message[2])
            return
        raise MutationError(f"the worker failed: {message[-1]}")
    if dead or zygote.late():
        what = "crashed: its worker ended" if dead else "timed out (its worker hung)"
        finish(zygote, {"status": "crashed" if dead else "timeout", "what": what})
        idle.remove(zygote)
        zygote.stop()
        replacement = Zygote(request)
        wait_plan(replacement)
        zygotes[zygotes.index(zygote)] = replacement
        idle.append(replacement)
