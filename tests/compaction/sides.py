"""The compaction sides tests drive: the oracle itself (lazy or eager), registered factories, and
the lock-step and I12 runs on them by name."""

from __future__ import annotations

from kvfuzz.fuzz.compaction.i12 import check_i12
from kvfuzz.fuzz.compaction.lockstep import run_trace
from kvfuzz.fuzz.compaction.sides import oracle_eager, oracle_lazy
from kvfuzz.fuzz.compaction.target import COMPACTION

ORACLE = {"oracle.lazy": oracle_lazy, "oracle.eager": oracle_eager}


def factory(name: str):
    return ORACLE.get(name) or COMPACTION.resolve(name).load()


def side(name: str, params):
    return factory(name)(params)


def op_by_op(trace, name: str):
    """The lock-step run alone (no I12): the first failing op's problems (texts), or None."""
    return run_trace(trace, factory(name))[0]


def i12(trace, lazy: str = "compaction.lazy", eager: str = "compaction.eager"):
    """I12's problems (texts), or None when it holds."""
    return [text for _, text in check_i12(trace, factory(lazy), factory(eager))] or None
