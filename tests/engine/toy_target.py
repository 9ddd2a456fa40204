"""A toy trace target, complete in one file: a counter that adds and resets. Its parts are what
a real target puts in its folders (trace and codec, generator, oracle, catalogue, judge,
Target); `test_toy_target.py` adds it to the one table and shows every command finds it.
Implementations by import path: `tests.engine.toy_target:Counter` (and the broken ones)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.lockstep import Call, Lockstep, handles
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.impl.registry import MUTANT, OURS, Implementation, check_shape
from kvfuzz.strategies.inputs import FieldReader, Origin, dataclass_op_to_json, document_id
from kvfuzz.strategies.sources import TraceGenerator

FORMAT = "kvfuzz-toy-trace/1"
MAX_OPS, MAX_N = 2**12, 2**20


# -- the trace (strategies/<target>/trace.py, codec.py, generator.py) ---------------------------
@dataclass(frozen=True)
class Add:
    n: int


@dataclass(frozen=True)
class Reset:
    pass


KINDS = {"add": Add, "reset": Reset}
NAMES = {cls: name for name, cls in KINDS.items()}


@dataclass(frozen=True)
class Trace:
    ops: tuple
    origin: Origin | None = None
    note: str = ""

    def trace_id(self) -> str:
        return document_id(to_json(self))

    def describe(self) -> str:
        return f"{len(self.ops)} ops"


def to_json(trace: Trace) -> dict:
    return {"format": FORMAT, "ops": [dataclass_op_to_json(op, NAMES[type(op)])
                                      for op in trace.ops]}


def from_json(data, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, {"format", "ops", "origin", "note"})
    ops = []
    for i, raw in enumerate(reader.ops(data.get("ops"), MAX_OPS)):
        kind = reader.op_kind(raw, f"ops[{i}]", KINDS)
        ops.append(Add(reader.integer(raw.get("n"), f"ops[{i}].n", low=0, high=MAX_N))
                   if kind is Add else Reset())
    return Trace(tuple(ops), reader.origin(data.get("origin")), reader.note(data.get("note")))


def build(rng, num_ops: int) -> Trace:
    return Trace(tuple(Add(rng.randrange(6)) if rng.random() < 0.8 else Reset()
                       for _ in range(num_ops)))


GENERATOR = TraceGenerator("toy/1", build, 30, 60)


# -- the oracle (oracle/<target>/) and implementations (impl/<target>/) -------------------------
class Model:
    def __init__(self):
        self.total = 0

    def add(self, n):
        self.total += n
        return self.total

    def reset(self):
        self.total = 0


class Counter:
    def __init__(self):
        self.value = 0

    def add(self, n):
        self.value += n
        return self.value

    def reset(self):
        self.value = 0


class ResetKeepsOne(Counter):
    """A mutant: reset leaves 1 behind."""

    def reset(self):
        self.value = 1


IMPLEMENTATIONS = (
    Implementation("toy.counter", "toy", f"{__name__}:Counter", "the toy counter", OURS),
    Implementation("mutant.toy.reset_keeps_one", "toy", f"{__name__}:ResetKeepsOne",
                   "reset leaves 1 behind", MUTANT),
)


# -- the judge and the target (fuzz/<target>/lockstep.py, target.py) ----------------------------
class ToyLockstep(Lockstep):
    KINDS = KINDS
    EVENTS = ("add", "reset")

    def build_model(self, trace):
        return Model()

    def build_impl(self, trace, cls, device):
        return cls()

    @handles(Add)
    def add(self, op: Add):
        self.count("add")
        yield Call(f"add({op.n})", "add", (op.n,), compared=True)

    @handles(Reset)
    def reset(self, op: Reset):
        self.count("reset")
        yield Call("reset()", "reset")

    def state(self, op):
        total = self.read("add", 0)  # adding nothing reads the total
        self.model.add(0)
        return [] if total == self.model.total else [
            ("total", f"expected {self.model.total}, actual {total}")]


def _shape(path, obj):
    check_shape(path, obj, 0, "a class with add(n) and reset()", cls=True,
                methods=("add", "reset"))


def _worst_input():
    return {"format": FORMAT, "ops": [{"op": "add", "n": MAX_N}] * MAX_OPS}


def _smaller_adds(item):
    for index, op in enumerate(item.ops):
        if isinstance(op, Add) and op.n > 1:
            yield replace(item, ops=item.ops[:index] + (Add(1),) + item.ops[index + 1:])


TOY = trace_target(
    "toy",
    codec=TraceCodec(FORMAT, from_json, to_json, _worst_input, "counter"),
    inputs=TraceInputs(GENERATOR),
    judge=LockstepJudge(ToyLockstep),
    catalogue=Catalogue("toy", IMPLEMENTATIONS, _shape),
    shrinker=TraceShrinker(extra=_smaller_adds),
    default_cases=50)
