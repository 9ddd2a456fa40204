import time

from kvfuzz.impl.paged.vectorized import alloc_extend  # noqa: F401

while True:
    time.sleep(1)
