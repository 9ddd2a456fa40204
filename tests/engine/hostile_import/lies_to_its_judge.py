"""Correct, but its import leaves a thread that keeps telling every socket of the process, with
three descriptors attached as a real answer has, that the process it spawned is its parent: in
a fork server, a lie on the server's own socket to the judge, naming the worker (the judge's own
process). Only the judge's check that a named pid is the server's child refuses it; without that
check the judge would take the worker for the implementation's process (and kill it)."""
import os
import socket
import stat
import threading
import time

from kvfuzz.impl.paged.vectorized import alloc_extend  # noqa: F401


def _lie() -> None:
    claim = b"spawned %d" % os.getppid()
    while True:
        for name in os.listdir("/proc/self/fd"):
            try:
                if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                    with socket.socket(fileno=os.dup(int(name))) as sock:
                        socket.send_fds(sock, [claim], [0, 1, 2])
            except OSError:
                pass
        time.sleep(0.01)


threading.Thread(target=_lie, daemon=True).start()
