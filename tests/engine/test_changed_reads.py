"""State reads that cross as what changed (`impl/changed_reads.py`, `Lockstep.read_changed`): the
judge holds the driver's whole answer after every read, whatever changed and however (a 6 that
became 6.0, a list that grew or shrank, a part that became None), a new or out-of-step judge gets
the whole state, and a malformed answer is the implementation's raise in the state read. A judge
in the driver's own process asks for the whole state each time (nothing encoded or kept)."""

from __future__ import annotations

import random

import pytest

from kvfuzz.fuzz.engine.lockstep import ImplementationRaised, Lockstep
from kvfuzz.impl.changed_reads import ChangedReads


class Driver(ChangedReads):
    def __init__(self, state: dict):
        self.state = state

    def read_state(self, since: int):
        return self.changed("state", since, dict(self.state))


class Judge(Lockstep):
    """Only `read_changed` is used: no ops, built by hand; as a worker's judge (its driver
    behind a proxy) unless `in_process`."""

    def __init__(self, impl, in_process: bool = False):
        self.impl, self.returned, self.in_process = impl, [], in_process


def _mutate(rng: random.Random, state: dict) -> None:
    key = rng.choice(sorted(state))
    value = state[key]
    roll = rng.random()
    if isinstance(value, list) and value and roll < 0.4:
        value = list(value)
        value[rng.randrange(len(value))] = rng.choice([0, 1, 6, 6.0, True, None, (1, 2)])
    elif isinstance(value, list) and roll < 0.7:
        value = list(value) + [rng.randrange(9)] if rng.random() < 0.5 else list(value)[:-1]
    else:
        value = rng.choice([6, 6.0, None, [], [1, 2], {"a": [1]}, ("x", 1.5), "s", -0.0])
    state[key] = value


@pytest.mark.parametrize("seed", range(20))
def test_the_judge_holds_the_whole_state_after_every_read(seed):
    rng = random.Random(seed)
    state = {"ints": list(range(20)), "mixed": [None, (1, 2), 3.0] * 5, "n": 6,
             "map": {(1, 2): [3]}}
    driver = Driver(state)
    judge = Judge(driver)
    for _ in range(60):
        for _ in range(rng.randrange(3)):
            _mutate(rng, state)
        held = judge.read_changed("read_state")
        assert held == state
        # == is not enough: 6.0 for 6, True for 1, a tuple for a list would pass it
        assert repr(held) == repr(state)


def test_only_the_changed_items_cross():
    state = {"ints": list(range(40)), "other": "same"}
    driver = Driver(state)
    judge = Judge(driver)
    judge.read_changed("read_state")
    state["ints"] = state["ints"][:]
    state["ints"][6] = 6.0  # == the 6 it replaces: a change all the same
    state["ints"][7] = 6.0
    judge.read_changed("read_state")
    number, whole, sent = judge.returned[-2]
    assert not whole and list(sent) == ["ints"]
    assert sent["ints"] == ("items", 40, ((6, 6.0), (7, 6.0)))
    assert judge.returned[-1]["ints"][6] == 6.0 and type(judge.returned[-1]["ints"][6]) is float


def test_a_judge_in_the_drivers_process_reads_the_whole_state_and_nothing_is_kept():
    state = {"ints": list(range(40)), "other": "same"}
    driver = Driver(state)
    judge = Judge(driver, in_process=True)
    for value in (6, 6.0):
        state["ints"] = state["ints"][:6] + [value] + state["ints"][7:]
        held = judge.read_changed("read_state")
        assert repr(held) == repr(state)
        number, whole, sent = judge.returned[-2]
        assert whole is None and repr(sent) == repr(state)  # as it is: nothing wrapped
        assert "state" not in driver._changed_reads  # no marshal bytes kept
    # a worker's judge over the same driver after it: the whole state, then changes
    worker = Judge(driver)
    assert worker.read_changed("read_state") == state and worker.returned[-2][1] is True
    state["other"] = "changed"
    assert worker.read_changed("read_state") == state
    assert worker.returned[-2][2] == {"other": ("=", "changed")}


def test_a_check_in_process_reads_whole_and_a_workers_reads_changes():
    """`Lockstep.__init__` tells the two apart by the driver: a proxy (`RemoteObject`) or not."""
    from kvfuzz.fuzz.engine.remote import RemoteObject

    class Built(Judge):
        KINDS = {}

        def build_impl(self, trace, impl, device, **options):
            return impl

        def build_model(self, trace):
            return None

    built = Built.__new__(Built)
    Lockstep.__init__(built, None, Driver({}))
    assert built.in_process is True
    Lockstep.__init__(built, None, RemoteObject(None, 0))  # a worker's: behind a proxy
    assert built.in_process is False


def test_a_new_or_out_of_step_judge_gets_the_whole_state():
    state = {"a": [1, 2, 3], "b": 4}
    driver = Driver(state)
    first = Judge(driver)
    first.read_changed("read_state")
    second = Judge(driver)  # a new lock step over the same (live) driver
    assert second.read_changed("read_state") == state
    assert second.returned[0][1] is True  # whole
    state["b"] = 5
    assert first.read_changed("read_state") == state  # behind the driver's count: whole again
    assert first.returned[-2][1] is True


@pytest.mark.parametrize("answer", [None, (1, False, {}), (1, True, {"a": ("?", 1)}),
                                    (1, True, {"a": ("items", 2, ((5, 1),))}),
                                    (1, True, []), ("1", True, {}), (0, None, []),
                                    (0, "whole", {})])
def test_a_malformed_answer_is_the_implementations_raise(answer):
    class Lying:
        def read_state(self, since):
            return answer

    with pytest.raises(ImplementationRaised, match="read_state"):
        Judge(Lying()).read_changed("read_state")
