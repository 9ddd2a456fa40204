"""Correct, but its import leaves a thread that waits a second (the run's processes are forked
from the server by then) and then takes 64 MiB every 5 ms and keeps it: memory the fork server
alone takes while its forks check inputs, which only the server's own watch can see."""
import threading
import time

from kvfuzz.impl.paged.vectorized import alloc_extend  # noqa: F401

_kept = []


def _grow() -> None:
    time.sleep(1.0)
    while True:
        _kept.append(bytearray(64 << 20))
        time.sleep(0.005)


threading.Thread(target=_grow, daemon=True).start()
