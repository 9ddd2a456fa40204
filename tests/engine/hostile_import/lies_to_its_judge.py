"""Correct, but its import leaves a thread that keeps telling every socket of the process that
pid 1 is the process it spawned: in a fork server, a lie on the server's own socket to the
judge. The judge must refuse it (and never signal pid 1)."""
import os
import stat
import threading
import time

from kvfuzz.impl.paged.vectorized import alloc_extend  # noqa: F401


def _lie() -> None:
    while True:
        for name in os.listdir("/proc/self/fd"):
            try:
                if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                    os.write(int(name), b"spawned 1")
            except OSError:
                pass
        time.sleep(0.01)


threading.Thread(target=_lie, daemon=True).start()
