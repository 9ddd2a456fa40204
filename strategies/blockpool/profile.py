"""What a block pool may declare (`Implementation.preconditions`): that its callers never free a
block more times than it has references (vLLM's `BlockPool` declares it: its `free_blocks` does
not check; docs/upstream-vllm.md, "A block twice in one free_blocks call"), and that it has no
`unpin_blocks` (read from an earlier release's class). Its generator then leaves those ops out,
and a trace that has one is outside its contract. Standard library only.
"""

from __future__ import annotations

from kvfuzz.strategies.blockpool.trace import DoubleFree, Trace, Unpin, UnpinIds

NO_DOUBLE_FREE = ("free_blocks is never given a block more times than it has references "
                  "(vLLM's pool does not check: a double free is its caller's bug, #42571)")
# What a pool class may lack (read from the class: fuzz/blockpool/target.py).
NO_UNPIN = "no unpin_blocks (an earlier vLLM release): a finished request's blocks are freed"
# What an outside class may declare, by name (`__kvfuzz__`, or `--impl path@name`).
DECLARABLE = {"no_double_free": NO_DOUBLE_FREE}


def double_frees_allowed(preconditions) -> bool:
    return NO_DOUBLE_FREE not in preconditions


def unpins_allowed(preconditions) -> bool:
    return NO_UNPIN not in preconditions


def broken(trace: Trace, preconditions) -> list[str]:
    """The preconditions `trace` breaks (empty: the pool supports it)."""
    found = []
    if not double_frees_allowed(preconditions) and \
            any(isinstance(op, DoubleFree) for op in trace.ops):
        found.append(NO_DOUBLE_FREE)
    if not unpins_allowed(preconditions) and \
            any(isinstance(op, (Unpin, UnpinIds)) for op in trace.ops):
        found.append("unpins blocks, and the class has no unpin_blocks")
    return found
