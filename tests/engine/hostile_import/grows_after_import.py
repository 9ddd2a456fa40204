"""Correct, but its import leaves a thread that takes 16 MiB every 10 ms and keeps it: in a fork
server, memory the server takes while its forks check inputs."""
import threading
import time

from kvfuzz.impl.paged.vectorized import alloc_extend  # noqa: F401

_kept = []


def _grow() -> None:
    while True:
        _kept.append(bytearray(16 << 20))
        time.sleep(0.01)


threading.Thread(target=_grow, daemon=True).start()
