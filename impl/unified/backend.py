"""Which tree core a `UnifiedRadixCache` builds: `CacheInitParams.tree_core_backend` from SGLang
0.5.21 on; in 0.5.20 the environment's `SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND` (default
"python"), read when the cache is built; whether the installed release registers a Rust core
at all (`rust_core_absent`: 0.5.17 and 0.5.18 register only the Python one, and their cache's
constructor raises for "rust"). Nothing imported here; `rust_core_absent` reads the registry
module the loaded class's module imported."""

from __future__ import annotations

import contextlib
import os
import sys

BACKEND_VARIABLE = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"
REGISTRY = "sglang.srt.mem_cache.unified_cache.tree_core_registry"


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


def rust_core_absent() -> str | None:
    """Why the installed release cannot build a Rust tree core, or None where it may (its
    registry names a "rust" backend; whether that one builds here is the driver's to read) or
    where there is no registry to ask (a release without the pluggable core: other checks
    say). Read from the registry the loaded class's module has imported (every release with
    one imports it at the top of unified_radix_cache.py): nothing is imported here, so a class
    that is not SGLang's (a quick test's fake) loads no SGLang, which raised KeyError there."""
    registry = sys.modules.get(REGISTRY)
    if registry is None:
        return None
    names = getattr(registry, "registered_tree_core_backends", None)
    if not callable(names):
        return None
    backends = [str(name) for name in names()]
    if "rust" in backends:
        return None
    return (f"its tree core registry has no 'rust' backend (registered: "
            f"{', '.join(backends) or 'none'}; the .python entries run its core)")
