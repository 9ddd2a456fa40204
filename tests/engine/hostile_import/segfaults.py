import ctypes

from kvfuzz.impl.paged.vectorized import alloc_extend  # noqa: F401

ctypes.string_at(0)
