"""The compaction sides tests drive: the oracle itself (lazy or eager), registered factories, and
the lock-step and I12 runs on them by name."""

from __future__ import annotations

from kvfuzz.fuzz.compaction.i12 import check_i12
from kvfuzz.fuzz.compaction.target import COMPACTION
from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.fuzz.engine.trace_target import LockstepJudge
from kvfuzz.impl.registry import YOURS, Implementation, register_object
from kvfuzz.oracle.compaction.model import CompactionModel


def oracle_lazy(params, device: str = "cpu") -> CompactionModel:
    """The model itself as a side (lazy, or eager below): the harness tested on itself."""
    return CompactionModel(params, lazy=True)


def oracle_eager(params, device: str = "cpu") -> CompactionModel:
    return CompactionModel(params, lazy=False)


ORACLE = {"oracle.lazy": oracle_lazy, "oracle.eager": oracle_eager}
OP_BY_OP = LockstepJudge(COMPACTION.judge.lockstep)  # the target's judge without I12


def factory(name: str):
    return ORACLE.get(name) or COMPACTION.catalogue.resolve(name).load()


def side(name: str, params):
    return factory(name)(params)


def run_trace(trace, factory) -> list[str] | None:
    """The lock-step run alone (no I12): the first failing op's problems (texts), or None."""
    impl = Implementation("factory", "compaction", register_object(factory), "test", YOURS)
    outcome = OP_BY_OP.check(COMPACTION, trace, impl)
    if outcome.status != DIVERGE:
        return None
    return [text for label, text in outcome.divergence.lines if label not in ("call", "before")]


def op_by_op(trace, name: str):
    return run_trace(trace, factory(name))


def i12(trace, lazy: str = "compaction.lazy", eager: str = "compaction.eager"):
    """I12's problems (texts), or None when it holds."""
    return [text for _, text in check_i12(trace, factory(lazy), factory(eager))] or None
