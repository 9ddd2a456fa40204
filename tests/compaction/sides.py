"""The compaction sides tests drive: the oracle itself (lazy or eager), registered factories, and
the lock-step and I12 runs on them by name."""

from __future__ import annotations

from kvfuzz.fuzz.compaction.i12 import check_i12
from kvfuzz.fuzz.compaction.target import COMPACTION
from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.fuzz.engine.trace_target import LockstepJudge
from kvfuzz.impl.registry import YOURS, Implementation, register_object
from kvfuzz.oracle.compaction.model import CompactionModel
from kvfuzz.oracle.compaction.tokens import pages_named, tokens_of


class ModelSide:
    """The model behind an implementation's facade: above page size 1 `alloc`, `free` and
    `reserve` take and return tokens (kvfuzz/impl/compaction/allocator.py); the rest is the
    model's own."""

    def __init__(self, params, lazy: bool):
        self.model, self.size = CompactionModel(params, lazy=lazy), params.page_size

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def alloc(self, name: str, num_tokens: int):
        vids = self.model.alloc(name, num_tokens // self.size)
        return None if vids is None else tokens_of(vids, self.size)

    def free(self, name: str, tokens) -> None:
        self.model.free(name, pages_named(tokens, self.size))

    def reserve(self, name: str, num_tokens: int):
        pages = self.model.reserve(name, num_tokens // self.size)
        return None if pages is None else tokens_of(pages, self.size)


def oracle_lazy(params, device: str = "cpu") -> ModelSide:
    """The model itself as a side (lazy, or eager below): the harness tested on itself."""
    return ModelSide(params, lazy=True)


def oracle_eager(params, device: str = "cpu") -> ModelSide:
    return ModelSide(params, lazy=False)


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
