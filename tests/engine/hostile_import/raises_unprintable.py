from kvfuzz.impl.paged.vectorized import alloc_extend  # noqa: F401


class Unprintable(RuntimeError):
    def __str__(self):
        raise ValueError("no message for you")


raise Unprintable()
