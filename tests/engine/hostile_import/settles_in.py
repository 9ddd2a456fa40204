"""Correct, but at import: a working directory of its own, a SIGINT handler that ignores the
signal, and a thread that never ends. None of it may reach the supervisor."""
import os
import signal
import threading
import time

from kvfuzz.impl.paged.vectorized import alloc_extend  # noqa: F401

os.chdir("/")
signal.signal(signal.SIGINT, signal.SIG_IGN)
threading.Thread(target=lambda: time.sleep(3600), name="settles_in forever", daemon=False).start()
