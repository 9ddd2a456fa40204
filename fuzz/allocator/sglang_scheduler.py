"""`python -m kvfuzz.fuzz.allocator.sglang_scheduler`: one session of SGLang's own Scheduler
(`sglang_session.py`) in a process of its own, its allocator's calls counted and timed, and
guarded (`--guard`) or recorded (`--record DIR`) by kvfuzz; one JSON line out, then the
process ends (SGLang's threads would keep it alive). `session_in_subprocess` runs it for the
tests and `kvfuzz bench guard`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time

from kvfuzz.fuzz.allocator.sglang_session import Workload, run_session


class CallCounter:
    """A plain proxy of the allocator (no subclass) that counts the calls of each method and
    the seconds inside them (what the wrapper under it adds included): what the command line
    reports of a session, and what `kvfuzz bench guard` reads."""

    def __init__(self, allocator):
        object.__setattr__(self, "_allocator", allocator)
        object.__setattr__(self, "calls", collections.Counter())
        object.__setattr__(self, "seconds", collections.Counter())

    @property
    def __class__(self):  # SGLang's isinstance checks of its allocator hold for the counter
        return self._allocator.__class__  # through a guard under it, too

    def __getattr__(self, name):
        value = getattr(self._allocator, name)
        if not callable(value) or name.startswith("__"):
            return value

        def counted(*args, **kwargs):
            began = time.thread_time()  # this thread's CPU time, not the neighbours'
            try:
                return value(*args, **kwargs)
            finally:
                self.calls[name] += 1
                self.seconds[name] += time.thread_time() - began
        return counted

    def __setattr__(self, name, value):  # SGLang sets attributes of its allocator
        setattr(self._allocator, name, value)


def session_in_subprocess(seed: int, extra_args=(), timeout: float = 600,
                          server=None) -> dict:
    """Session `seed` run by this module's command in a process of its own (what SGLang's
    scheduler leaves behind ends with it): the command's JSON line. `extra_args`: the
    command's options (`--page-size 1`, `--retract`, `--guard`, ...). With `server` (a
    `sglang_zygote.SessionServer`) the process is forked from one that imported SGLang
    already, instead of a fresh interpreter."""
    command = [sys.executable, "-m", "kvfuzz.fuzz.allocator.sglang_scheduler",
               "--seed", str(seed), *extra_args]
    if server is not None:
        done = server.run(command[3:], timeout=timeout)
    else:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(command[1:])} exited {done.returncode}: "
                           f"{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def _wrap(args):
    """What stands for the allocator: a call counter, over `kvfuzz.guard` or `kvfuzz.record`
    of it when asked."""
    if not (args.guard or args.record):
        return CallCounter
    from kvfuzz.fuzz.engine.guard import live_guard

    guard = live_guard(_target(args))  # what kvfuzz.guard and kvfuzz.record call

    def wrap(allocator):
        if args.guard:
            return CallCounter(guard(allocator, corpus=args.corpus, impl=args.impl))
        return CallCounter(guard(allocator, check=False))
    return wrap


def _target(args) -> str:
    return "swa" if args.swa else "allocator"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m kvfuzz.fuzz.allocator.sglang_scheduler",
        description="One session of SGLang's own Scheduler on the CPU, its allocator's calls "
                    "counted (and guarded or recorded by kvfuzz); prints one JSON line.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--page-size", type=int, default=Workload.page_size)
    parser.add_argument("--retract", action="store_true",
                        help="force retractions (SGLANG_TEST_RETRACT)")
    parser.add_argument("--swa", action="store_true",
                        help="a hybrid sliding-window model: SGLang builds its SWA allocator, "
                             "guarded as the swa target")
    parser.add_argument("--tree-core", choices=("rust", "python"), default="",
                        help="UnifiedRadixCache's tree core (default: SGLang's, the Rust one); "
                             "the Python one releases in a fixed order, so a recording repeats")
    parser.add_argument("--impl", help="an allocator implementation's name or import path "
                                       "(e.g. a mutant) in place of SGLang's class (of the "
                                       "allocator target; with --swa, of swa)")
    parser.add_argument("--guard", action="store_true",
                        help="kvfuzz.guard the allocator: a divergence ends the session, "
                             "saved under --corpus")
    parser.add_argument("--record", metavar="DIR",
                        help="kvfuzz.record the allocator's calls, saved under DIR at the end")
    parser.add_argument("--corpus", default="corpus", help="where a divergence is saved")
    args = parser.parse_args(argv)
    workload = Workload(page_size=args.page_size, retract=args.retract, swa=args.swa,
                        tree_core=args.tree_core)
    allocator_class = None
    if args.impl:
        from kvfuzz.fuzz.targets import TARGETS

        allocator_class = TARGETS[_target(args)].catalogue.resolve(args.impl).load()
    # The model is tiny (hidden size 64, a few layers): torch's intra-op threads only spin
    # around its matmuls. One thread halved a session's CPU (measured 2026-12-07: 22.3 s to
    # 12.4 s user+sys, seed 2 --swa --retract --guard); what the allocator is asked is the same.
    import torch

    torch.set_num_threads(1)
    line = {}
    try:
        session = run_session(args.seed, _wrap(args), workload, allocator_class)
    except Exception as error:  # a divergence raised inside the engine: reported, not lost
        found = getattr(error, "divergence", None)
        if found is None:
            raise
        line["divergence"] = dict(signature=list(found.signature), saved=found.saved_path,
                                  impl=found.impl, report=found.report())
    else:
        line.update(steps=session.steps, finished=session.finished, requests=session.requests,
                    retractions=session.retractions, tree_core=session.tree_core,
                    calls=dict(sorted(session.allocator.calls.items())),
                    seconds=dict(sorted(session.allocator.seconds.items())))
        inner = session.allocator._allocator  # under the call counter
        line["wrapped"] = type(inner).__name__  # `kvfuzz guard allocator` wraps it unasked
        recorded = getattr(inner, "kvfuzz_session", None)
        if recorded is not None:
            line["ops"] = len(recorded.ops)
            if args.record:
                options = " ".join(a for a in sys.argv[1:] if a != args.record)
                recorded.set_header(note=f"recorded (kvfuzz.record) from SGLang's Scheduler: "
                                         f"python -m kvfuzz.fuzz.allocator.sglang_scheduler "
                                         f"{options.replace('--record', '--record DIR')}")
                line["saved"] = str(recorded.save(args.record))
    print(json.dumps(line))


def main_then_exit(argv=None) -> None:
    """`main`, then the process ends (status 1 after a raise, its traceback printed): the
    scheduler's threads would keep it alive past the session. The command's entry, and each
    session a test's server forks (`sglang_zygote.py`)."""
    code = 0
    try:
        main(argv)
    except BaseException:  # noqa: BLE001 - reported, then the process ends regardless
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main_then_exit()
