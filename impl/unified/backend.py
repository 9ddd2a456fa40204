"""Which tree core a `UnifiedRadixCache` builds: `CacheInitParams.tree_core_backend` from SGLang
0.5.21 on; in 0.5.20 the environment's `SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND` (default
"python"), read when the cache is built. No torch, no SGLang imported here."""

from __future__ import annotations

import contextlib
import os

BACKEND_VARIABLE = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"


@contextlib.contextmanager
def backend_in_environment(backend: str):
    """The core named in the environment while a 0.5.20 cache is built, as it was after."""
    before = os.environ.get(BACKEND_VARIABLE)
    os.environ[BACKEND_VARIABLE] = backend
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(BACKEND_VARIABLE, None)
        else:
            os.environ[BACKEND_VARIABLE] = before


def environment_backend() -> str:
    """The core a 0.5.20 cache built now would get."""
    return os.environ.get(BACKEND_VARIABLE, "python")
