import os

from kvfuzz.impl.paged.vectorized import alloc_extend  # noqa: F401

os._exit(0)
