"""What a block pool may declare (`Implementation.preconditions`): that its callers never free a
block more times than it has references. vLLM's `BlockPool` declares it: its `free_blocks` does
not check (docs/upstream-vllm.md, "A block twice in one free_blocks call"). Its generator then
leaves double frees out, and a trace that has one is outside its contract. Standard library only.
"""

from __future__ import annotations

from kvfuzz.strategies.blockpool.trace import DoubleFree, Trace

NO_DOUBLE_FREE = ("free_blocks is never given a block more times than it has references "
                  "(vLLM's pool does not check: a double free is its caller's bug, #42571)")
# What an outside class may declare, by name (`__kvfuzz__`, or `--impl path@name`).
DECLARABLE = {"no_double_free": NO_DOUBLE_FREE}


def double_frees_allowed(preconditions) -> bool:
    return NO_DOUBLE_FREE not in preconditions


def broken(trace: Trace, preconditions) -> list[str]:
    if double_frees_allowed(preconditions):
        return []
    return [NO_DOUBLE_FREE] if any(isinstance(op, DoubleFree) for op in trace.ops) else []
