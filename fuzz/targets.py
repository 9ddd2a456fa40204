"""Targets beyond paged extend/decode plug into `kvfuzz diff` and `kvfuzz replay` here.

Each entry names, by import path (resolved only when used):
- `diff`: `fn(args) -> int`, args carrying target, impl (list of specs), cases, seed, start,
  jobs, corpus, device; returns the exit status (0 agree, 1 divergence);
- `replay`: `fn(path, data: dict, impl_specs: list[str], out) -> int` for a file whose "format"
  field is `format`; raises `strategies.case.CaseFormatError` for a malformed file;
- `describe` (optional): `fn() -> [(name, kind, summary)]`, the implementations `kvfuzz list`
  shows; it must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str
    format: str
    diff: str
    replay: str
    describe: str = ""


PLUGINS: dict[str, Target] = {}


def register(target: Target) -> None:
    PLUGINS[target.name] = target


def by_format(format_name: str) -> Target | None:
    return next((t for t in PLUGINS.values() if t.format == format_name), None)


import kvfuzz.fuzz.allocator_target  # noqa: E402,F401  registers "allocator" (imports nothing heavy)
import kvfuzz.fuzz.compaction_target  # noqa: E402,F401  registers "compaction" (imports nothing heavy)
