"""kvfuzz: differential fuzzing and verification for the KV-cache page allocators of LLM serving
engines. The repository's top-level folders install as its subpackages: `kvfuzz.strategies`,
`kvfuzz.oracle`, `kvfuzz.impl`, `kvfuzz.fuzz` and `kvfuzz.bench` (see pyproject.toml).

The library (docs/use-in-your-ci.md), loaded on first use so `import kvfuzz.x` stays light:
- `diff`, `replay`, `check`, `assert_agrees`, `implementation` (kvfuzz/api.py);
- `guard` and `record`: a live object an engine is using, checked or recorded call by call;
- a Hypothesis strategy for every target's inputs, named after it from the target table
  (`kvfuzz.fuzz.targets`): `extend_cases`, `decode_cases`, and `<target>_traces` for each trace
  target (`allocator_traces`, `compaction_traces`, `mamba_traces`, ...);
- `Mismatch`, the AssertionError a failure raises, carrying its `Divergence`.

The released SGLang and vLLM that `kvfuzz upstream fetch` put in kvfuzz's cache are importable
once kvfuzz is (`kvfuzz.impl.upstream_cache`: appended to `sys.path`, never ahead of yours).
"""

from __future__ import annotations

import importlib

from kvfuzz.impl import upstream_cache

__version__ = "0.1.0"
upstream_cache.activate()  # the released engines of `kvfuzz upstream fetch`, if fetched
_API = ("diff", "replay", "check", "assert_agrees", "implementation", "applicable", "guard",
        "record", "GuardUnsupported", "DiffResult", "ReplayResult", "Divergence", "Mismatch",
        "Outcome")


def _strategies() -> dict:
    """{public name: the target whose strategy it is}, from the table (imported on first use)."""
    from kvfuzz.fuzz.targets import TARGETS

    return {target.strategy_name: target for target in TARGETS.values()}


def _strategy(target):
    def strategy(*args, **kwargs):
        return target.generator.strategy(*args, **kwargs)
    strategy.__name__ = strategy.__qualname__ = target.strategy_name
    strategy.__doc__ = (f"Hypothesis strategy of {target.name} {target.codec.noun}s "
                        f"(`{target.codec.format}`): {target.generator.strategy.__doc__}")
    return strategy


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module("kvfuzz.api"), name)
    if name == "__all__":
        return ["__version__", *_API, *_strategies()]
    strategies = _strategies() if not name.startswith("__") else {}
    if name in strategies:
        return _strategy(strategies[name])
    raise AttributeError(f"module 'kvfuzz' has no attribute {name!r}")


def __dir__():
    return sorted(["__version__", *_API, *_strategies()])
