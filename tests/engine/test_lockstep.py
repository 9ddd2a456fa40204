"""The shared lock-step base (`kvfuzz.fuzz.engine.lockstep`): declarations are checked when a
judge's class is defined, and the base runs a declared judge as the trace targets rely on (a raise
is the implementation's problem, a refusal must be matched, a call that returned is recorded even
when it differs, no state read after an op that called nothing, a kept caller tensor named). A toy
counter target: the oracle is a dict, the implementation a small class."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvfuzz.fuzz.engine.lockstep import POISON, Call, Lockstep, LockstepError, handles
from kvfuzz.fuzz.targets import TARGETS


@dataclass(frozen=True)
class Add:
    n: int


@dataclass(frozen=True)
class Reset:
    pass


KINDS = {"add": Add, "reset": Reset}


class Refused(Exception):
    """The toy oracle's refusal."""


class Model:
    def __init__(self):
        self.total = 0

    def add(self, n):
        if n < 0:
            raise Refused("negative")
        self.total += n
        return self.total

    def reset(self):
        self.total = 0


class Counter:
    """A correct implementation; subclasses below break it."""

    def __init__(self):
        self.total = 0

    def add(self, n):
        if n < 0:
            raise ValueError("negative")
        self.total += n
        return self.total

    def reset(self):
        self.total = 0


class Judge(Lockstep):
    KINDS = KINDS
    EVENTS = ("add", "reset")
    REJECTIONS = (Refused,)

    def build_model(self, trace):
        self.reads = 0
        self.recorded = []
        return Model()

    def build_impl(self, trace, cls, device):
        return cls()

    @handles(Add)
    def add(self, op):
        if op.n == 0:
            return  # resolves to nothing
        self.count("add")
        result = yield Call(f"add({op.n})", "add", (op.n,), compared=True)
        self.recorded.append(result)

    @handles(Reset)
    def reset(self, op):
        self.count("reset")
        yield Call("reset()", "reset")

    def state(self, op):
        self.reads += 1
        total = self.read("total_now")
        return [] if total == self.model.total else [("total", f"expected {self.model.total}, "
                                                               f"actual {total}")]


class Good(Counter):
    def total_now(self):
        return self.total


def run(cls, ops):
    judge = Judge(None, cls)
    return judge, [judge.step(op) for op in ops]


def test_a_correct_implementation_agrees_and_nothing_resolves_to_nothing():
    judge, steps = run(Good, [Add(2), Add(0), Reset(), Add(3)])
    assert [problems for _, problems in steps] == [[], [], [], []]
    assert steps[1] == (None, [])  # Add(0): no call, no log line, no state read
    assert judge.reads == 3 and judge.log == ["add(2) -> 2", "reset()", "add(3) -> 3"]
    assert judge.events == {"add": 2, "reset": 1}


def test_a_result_that_differs_is_reported_and_still_recorded():
    class OffByOne(Good):
        def add(self, n):
            return super().add(n) + 1

    judge, steps = run(OffByOne, [Add(2)])
    problems = steps[0][1]
    assert problems[0] == ("result", "expected 2, actual 3")
    assert judge.recorded == [(2, 3)]  # the handler saw both sides


def test_a_raise_is_the_implementations_crash_and_ends_the_op():
    class Raises(Good):
        def add(self, n):
            raise RuntimeError("boom")

    judge, steps = run(Raises, [Add(2)])
    label, text = steps[0][1][0]
    assert (label, text) == ("crash", "RuntimeError: boom") and judge.recorded == []


def test_a_refusal_must_be_matched():
    class Accepts(Good):
        def add(self, n):
            self.total += n
            return self.total

    _, good = run(Good, [Add(-1)])
    assert good[0][1] == []  # both refuse
    _, bad = run(Accepts, [Add(-1)])
    assert bad[0][1][0][0] == "rejection"


def test_a_state_read_that_raises_is_a_crash_in_the_state_read():
    judge, steps = run(Counter, [Add(2)])  # Counter has no total_now
    label, text = steps[0][1][0]
    assert label == "crash" and "(in the state read)" in text


def test_a_broken_constructor_is_every_ops_problem():
    class NoInit(Good):
        def __init__(self):
            raise OSError("no device")

    judge, steps = run(NoInit, [Add(1)])
    assert steps[0][1][0] == ("crash", "OSError: no device (in the constructor)")


def test_a_kept_caller_tensor_is_named():
    class Poisoned(Good):
        def total_now(self):
            return POISON

    _, steps = run(Poisoned, [Add(1)])
    assert [label for label, _ in steps[0][1]] == ["total", "ownership"]


def test_an_undeclared_event_is_an_error_when_counted():
    class Miscounts(Judge):
        @handles(Reset)
        def reset(self, op):
            self.count("rest")
            yield Call("reset()", "reset")

    with pytest.raises(LockstepError, match="event 'rest' is not in EVENTS"):
        Miscounts(None, Good).step(Reset())


@pytest.mark.parametrize("body, message", [
    ("no handler", "no handler for op Reset"),
    ("unknown op", "handler for an op not in KINDS: Other"),
    ("two handlers", "op Add has two handlers"),
    ("not a generator", "handler add must be a generator"),
    ("events repeated", "EVENTS must be distinct names"),
])
def test_declarations_are_checked_when_the_class_is_defined(body, message):
    @dataclass(frozen=True)
    class Other:
        pass

    def define():
        if body == "no handler":
            class Judge1(Lockstep):
                KINDS = {"add": Add, "reset": Reset}

                @handles(Add)
                def add(self, op):
                    yield Call("add")
        elif body == "unknown op":
            class Judge2(Lockstep):
                KINDS = {"add": Add}

                @handles(Add, Other)
                def add(self, op):
                    yield Call("add")
        elif body == "two handlers":
            class Judge3(Lockstep):
                KINDS = {"add": Add}

                @handles(Add)
                def add(self, op):
                    yield Call("add")

                @handles(Add)
                def add_again(self, op):
                    yield Call("add")
        elif body == "not a generator":
            class Judge4(Lockstep):
                KINDS = {"add": Add}

                @handles(Add)
                def add(self, op):
                    return Call("add")
        else:
            class Judge5(Lockstep):
                KINDS = {"add": Add}
                EVENTS = ("add", "add")

                @handles(Add)
                def add(self, op):
                    yield Call("add")

    with pytest.raises(LockstepError, match=message):
        define()


def test_every_trace_target_runs_on_the_shared_base():
    """No judge writes its own op loop: each trace target's judge is the shared
    `LockstepJudge` over a declared `Lockstep` that leaves the op pipeline to the base."""
    from kvfuzz.fuzz.engine.trace_target import LockstepJudge

    traces = [t for t in TARGETS.values() if t.codec.noun == "trace"]
    assert len(traces) == len(TARGETS) - 2  # all but the paged pair
    for target in traces:
        assert type(target.judge) is LockstepJudge, target.name
        assert issubclass(target.judge.lockstep, Lockstep), target.name
        assert "step" not in vars(target.judge.lockstep), f"{target.name} overrides the op loop"
