"""`kvfuzz --version`: kvfuzz's own version and what a report depends on, read from the installed
distributions' metadata (nothing is imported): Python, torch, and the released engines kvfuzz
runs (the pinned ones in kvfuzz's cache, or the user's own)."""

from __future__ import annotations

import importlib.metadata
import platform

from kvfuzz.impl.upstream_cache import activate

PARTS = ("torch", "triton", "hypothesis", "atheris", "sglang", "vllm")


def installed(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def version_text() -> str:
    activate()  # the fetched engines' metadata is in kvfuzz's cache
    parts = ", ".join(f"{name} {installed(name)}" for name in PARTS)
    return f"kvfuzz {installed('kvfuzz')} (Python {platform.python_version()}, {parts})"
