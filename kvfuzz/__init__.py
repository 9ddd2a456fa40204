"""kvfuzz: differential fuzzing and verification for the KV-cache page allocators of LLM serving
engines. The repository's top-level folders install as its subpackages: `kvfuzz.strategies`,
`kvfuzz.oracle`, `kvfuzz.impl`, `kvfuzz.fuzz` and `kvfuzz.bench` (see pyproject.toml).

The library (docs/use-in-your-ci.md), loaded on first use so `import kvfuzz.x` stays light:
- `diff`, `replay`, `check`, `assert_agrees`, `implementation` (kvfuzz/api.py);
- Hypothesis strategies for every target's inputs: `extend_cases`, `decode_cases`,
  `allocator_traces`, `compaction_traces`, `mamba_traces`, `swa_traces`,
  `blockpool_traces`, `kvmanager_traces`;
- `Mismatch`, the AssertionError a failure raises, carrying its `Divergence`.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"
_PUBLIC = {
    "kvfuzz.api": ("diff", "replay", "check", "assert_agrees", "implementation", "applicable",
                   "DiffResult", "ReplayResult", "Divergence", "Mismatch", "Outcome"),
    "kvfuzz.strategies.paged.hypothesis_cases": ("extend_cases", "decode_cases"),
    "kvfuzz.strategies.hypothesis_traces": ("allocator_traces", "compaction_traces",
                                            "mamba_traces", "swa_traces", "blockpool_traces",
                                            "kvmanager_traces"),
}
_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}
__all__ = ["__version__", *_WHERE]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'kvfuzz' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__():
    return sorted(__all__)
