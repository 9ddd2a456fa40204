"""A campaign worker's judge, apart from the implementations it judges.

In an atheris worker the implementations run in the worker's own process: libFuzzer's coverage
counters are there, and coverage of the implementation's code is what guides it. So the worker
does not judge: before it imports any implementation it forks a judge (`ApartJudge`), then runs
each check with the implementation behind the recording proxies (`transcript.record_check`, as
an implementation's process of `kvfuzz diff` does) and streams the transcript to the judge,
which checks it again with its own oracle and comparison (`Replay`) and answers with the
outcome. An implementation that patches kvfuzz's comparison, the lock step or torch in the
worker changes nothing the judge computes; a judge that is gone (killed, or its pipe corrupted
by the worker's side) ends the worker, whose in-flight input the campaign then triages (a judge
forked later would hold whatever the implementations patched).
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import signal
import traceback

from kvfuzz.fuzz.engine.apart import die_with_parent
from kvfuzz.fuzz.engine.containment import close_other_sockets, name_process
from kvfuzz.fuzz.engine.frames import FrameReader, ProtocolError, send
from kvfuzz.fuzz.engine.isolation import HarnessError, crash_outcome
from kvfuzz.fuzz.engine.remote import Ended
from kvfuzz.fuzz.engine.transcript import Replay, protocol, read_batch, record_check
from kvfuzz.fuzz.engine.target import Outcome
from kvfuzz.impl.registry import set_loader

JUDGE_LOST = 86  # a worker's exit status when its judge is gone (its input is then triaged)


class ApartJudge:
    """The worker's side: `check` has `guarded_check`'s answer, computed apart."""

    def __init__(self, target, memory: int):
        context = multiprocessing.get_context("fork")
        self.conn, child = context.Pipe()
        self.memory = memory
        self.process = context.Process(target=_serve, args=(child, target, os.getpid(),
                                                            memory), daemon=True)
        self.process.start()
        child.close()

    def check(self, target, item, impl) -> Outcome:
        own = (impl.path, impl.load())
        try:
            send(self.conn, ("check", item, impl))
            record_check(target, item, impl, "cpu", own, self.memory,
                         lambda message: send(self.conn, message))
            answer = self.conn.recv()
        except (OSError, EOFError):
            os._exit(JUDGE_LOST)
        if answer[0] == "error":
            raise HarnessError(answer[1])
        return answer[1]


def _serve(conn, target, parent: int, memory: int) -> None:
    die_with_parent(parent)
    close_other_sockets(keep=conn.fileno())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the campaign stops its worker; this dies too
    name_process(b"kvfuzz-judge")
    import torch  # noqa: F401  (what the drivers' modules import: now, not in the first input)
    frames = _Frames(conn)
    while True:
        try:
            message = frames.next()
            if not (len(message) == 3 and message[0] == "check"):
                raise protocol(f"a message of kind {str(message[0])!r:.40}")
            _, item, impl = message
            conn.send(("outcome", _judge(target, item, impl, memory, frames)))
        except Ended:  # the worker's side broke the protocol: no telling where a message starts
            os._exit(1)
        except Exception:  # noqa: BLE001 - our bug: the worker raises it
            conn.send(("error", traceback.format_exc()))


def _judge(target, item, impl, memory: int, frames) -> Outcome:
    replay = Replay([], memory, source=frames)
    set_loader(replay.load)
    try:
        outcome = target.check(item, impl, "cpu")
    except Ended as ended:  # the transcript ended the check (a crash, the memory, too short)
        outcome = crash_outcome(target, item, impl, ended.what, ended.kind)
    finally:
        set_loader(None)
    replay.finish()
    return outcome


class _Frames:
    """The judge's reading of the worker's pipe: messages in order, transcript batches checked
    for plain data; the worker gone is the judge's end."""

    def __init__(self, conn):
        self.conn, self.reader = conn, FrameReader(conn)
        self.inbox: collections.deque = collections.deque()

    def next(self) -> tuple:
        while not self.inbox:
            self.conn.poll(None)
            try:
                self.inbox.extend(self.reader.messages())
            except ProtocolError as error:
                raise protocol(str(error)) from None
            if not self.inbox and self.reader.eof:
                os._exit(0)
        return self.inbox.popleft()

    def batch(self) -> tuple[list, bool]:
        return read_batch(self.next())
