"""The unified trace: the radix trace's ops (`strategies.radix.trace`: what SGLang's scheduler asks
of its prefix cache, with a real allocator in the loop) run against a `UnifiedRadixCache` built
with the tree components `components` names, and its version-stable JSON form
("kvfuzz-unified-trace/1": the radix format's fields and ops, `components`, `window` for
"full+swa" only, `mamba_slots` for "full+mamba" only, `host_size` and `host_policy` for
"full+host" only). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvfuzz.strategies.inputs import dataclass_op_to_json, document_id, provenance
from kvfuzz.strategies.radix import trace as radix
from kvfuzz.strategies.radix.trace import (CREATES, KINDS, NAMES, POLICIES, RESET_IN_FLIGHT,
                                           describe_op, resets_in_flight)

__all__ = ["CREATES", "COMPONENTS", "FORMAT", "HOST_POLICIES", "MAX_HOST_SIZE",
           "MAX_MAMBA_SLOTS", "MAX_WINDOW", "KINDS",
           "TREE_OPS", "mamba_chunk", "POLICIES", "RESET_IN_FLIGHT",
           "Trace", "describe_op", "resets_in_flight", "to_json"]

FORMAT = "kvfuzz-unified-trace/1"
# The cache's tree components (`CacheInitParams.tree_components`): full attention alone is the
# configuration that corresponds to `RadixCache`; "full+swa" adds the sliding-window component,
# on SGLang's hybrid allocator, with a window of `window` tokens.
# "full+mamba" adds the Mamba component over a pool of `mamba_slots` state slots; its traces hold
# tree ops only (probes, inserts with a state, evictions, resets: `TREE_OPS`), since a request's
# own Mamba slot (copy-on-write, the ping-pong buffers) is not driven.
# "full+host" is full attention with HiCache's host tier (write-back, `host_size` host slots:
# impl/unified/host_tier.py); tree ops only too, read as the host judge says
# (fuzz/unified/host_lockstep.py: a touch is host pressure, a pin a host lock under pressure).
COMPONENTS = ("full", "full+swa", "full+mamba", "full+host")
MAX_WINDOW = 1 << 12
MAX_MAMBA_SLOTS = 1 << 10
MAX_HOST_SIZE = 1 << 14
# `--hicache-write-policy`: back a node up when the device evicts it (write_back), or when an
# insert makes it (write_through: a node's first insert, threshold 1)
HOST_POLICIES = ("write_back", "write_through")
TREE_OPS = (radix.Match, radix.Touch, radix.Pin, radix.Insert, radix.Evict, radix.Reset)


def mamba_chunk(page_size: int) -> int:
    """The Mamba cache chunk size a "full+mamba" cache is built with (the server's
    `_mamba_cache_chunk_size`): 4 tokens or a page, whichever is more, so that short keys reach
    the checkpoint grid (`lcm(chunk, page)`) a match's `mamba_branching_seqlen` is cut to."""
    return max(4, page_size)


@dataclass(frozen=True)
class Trace(radix.Trace):
    """A radix trace for a unified cache built with `components` (`window`: the SWA
    component's sliding window in tokens, 0 without it)."""

    components: str = "full"
    window: int = 0
    mamba_slots: int = 0
    host_size: int = 0
    host_policy: str = "write_back"  # HiCache's write policy ("full+host"): HOST_POLICIES

    def trace_id(self) -> str:
        return document_id(to_json(self))

    def describe(self) -> str:
        window = f" (window {self.window})" if self.window else \
            f" ({self.mamba_slots} Mamba slots)" if self.mamba_slots else \
            f" ({self.host_size} host slots, {self.host_policy})" if self.host_size else ""
        return f"{self.components} components{window}, {super().describe()}"


def to_json(trace: Trace) -> dict:
    window = {"window": trace.window} if trace.window else {}  # full-only documents as before
    if trace.mamba_slots:
        window = {"mamba_slots": trace.mamba_slots}
    if trace.host_size:
        window = {"host_size": trace.host_size}
        if trace.host_policy != "write_back":  # documents of the default as before
            window["host_policy"] = trace.host_policy
    return {"format": FORMAT, "components": trace.components, **window,
            "page_size": trace.page_size,
            "size": trace.size, "policy": trace.policy, "events": trace.events,
            "ops": [dataclass_op_to_json(op, NAMES[type(op)]) for op in trace.ops],
            **provenance(trace)}


def from_radix(trace: radix.Trace, components: str = "full", window: int = 0,
               mamba_slots: int = 0, host_size: int = 0,
               host_policy: str = "write_back") -> Trace:
    """The same ops and settings as a unified trace."""
    return Trace(trace.page_size, trace.size, trace.policy, trace.events, trace.ops,
                 trace.origin, trace.note, components=components, window=window,
                 mamba_slots=mamba_slots, host_size=host_size, host_policy=host_policy)
