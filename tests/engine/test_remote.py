"""The pieces of the judge apart (fuzz/engine/remote.py, impl_process.py), in this process: what
counts as plain data, how a raise crosses, and a transcript that does not follow the judge's
requests. The processes themselves: tests/engine/test_isolation.py."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.engine.transcript import Recorder, Replay, read_batch, size_text, weight
from kvfuzz.fuzz.engine.remote import (Ended, NotPlain, RemoteObject, RemoteRaised, apply, make,
                                       plain, raised_class)
from kvfuzz.impl.paged.calling import CallResult


class Counter:
    """A toy implementation: what a Recorder serves."""

    lazy = True

    def __init__(self, start: int = 0):
        self.value = start

    def add(self, n: int) -> int:
        if n < 0:
            raise ValueError(f"cannot add {n}")
        self.value += n
        return self.value

    def leak(self):
        return object()  # not plain data


class Record:
    path = "toy:Counter"


def _double(counter, factor: int) -> int:
    return counter.value * factor


def _drive(root) -> list:
    """What a judge does with the implementation: the same on both sides of a transcript."""
    counter = root(5)
    seen = [counter.lazy, counter.add(2), apply(_double, counter, 3)]
    try:
        counter.add(-1)
    except ValueError as error:  # a judge's `except ValueError` still works
        seen.append(str(error))
    try:
        counter.leak()
    except TypeError as error:  # a result that is not plain data is the implementation's raise
        seen.append(str(error)[:40])
    return seen + [make(_double, counter, 10)._oid]


def test_a_transcript_replays_what_the_implementation_answered():
    recorder = Recorder(("toy:Counter", Counter), 1 << 30)
    recorded = _drive(recorder.load(Record))
    plain(recorder.records)
    replayed = _drive(Replay(recorder.records, 1 << 30).load(Record))
    assert recorded == replayed
    assert recorded[:4] == [True, 7, 21, "cannot add -1"]
    assert recorded[4].startswith("returned a builtins.object")


def test_a_transcript_that_strays_from_the_judges_requests_is_a_corrupted_protocol():
    recorder = Recorder(("toy:Counter", Counter), 1 << 30)
    counter = recorder.load(Record)(5)
    counter.add(2)
    replay = Replay(recorder.records, 1 << 30)
    other = replay.load(Record)(5)
    with pytest.raises(Ended, match="its transcript has .*'add'.* where the judge asks .*'sub'"):
        other.sub(2)
    short = Replay(recorder.records[:2], 1 << 30).load(Record)(5)
    with pytest.raises(Ended, match="its transcript ended before the check did") as ended:
        short.add(2)
    assert ended.value.kind == "protocol"


def test_a_batch_that_is_not_plain_data_is_a_corrupted_protocol():
    """What arrives from the implementation's side is checked before any of it is replayed: a
    forged record (an object, an int past 64 bits) or a message of another shape."""
    assert read_batch(("end", [("call", 1, "add", ("value", 7))])) == \
        ([("call", 1, "add", ("value", 7))], True)
    for message in (("records", [("call", 1, "add", ("value", object()))]),
                    ("end", [("call", 1, "add", ("value", 1 << 70))]),
                    ("records", "not a list"), ("outcome", []), ("end",)):
        with pytest.raises(Ended, match="corrupted the worker protocol") as ended:
            read_batch(message)
        assert ended.value.kind == "protocol"


def test_what_counts_as_plain_data():
    plain([1, -(1 << 63), (1 << 64) - 1, "x", b"y", 1.5, None, True, {"a": (1, 2)}, {3}])
    plain(CallResult([1, 2], ("seq_lens",), ""))
    for value in (1 << 64, [1, [2, -(1 << 63) - 1]], object(), RemoteObject(None, 0),
                  CallResult("not a list", (), ""), CallResult([1, "2"], (), ""),
                  [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]):
        with pytest.raises(NotPlain):
            plain(value)


def test_a_raise_crosses_under_its_own_name():
    assert issubclass(raised_class("ValueError"), ValueError)
    assert issubclass(raised_class("AttributeError"), AttributeError)
    assert issubclass(raised_class("Unprintable"), RemoteRaised)
    assert raised_class("not a name!").__name__ == "Exception"
    oserror = raised_class("OSError")  # a layout that may not mix: still raised by that name
    assert oserror.__name__ == "OSError" and issubclass(oserror, RemoteRaised)


def test_sizes_read_as_people_write_them():
    assert [size_text(n) for n in (4 << 30, 1536 << 20, 1124 << 20, 100)] == \
        ["4 GiB", "1.5 GiB", "1.1 GiB", "100 bytes"]


@pytest.mark.parametrize("answer, units", [
    ((), 0), ([], 0), (("value", 7), 2), (list(range(1000)), 1000),
    (("value", [[1, 2], [3]]), 2 + 1 + (2 + 2 + 1)), ({"a": [1, 2]}, 1 + 2)])
def test_a_transcript_weighs_its_answers_without_raising(answer, units):
    """The weight batches a transcript; an empty answer once raised (IndexError) inside the
    implementation's recorder, which ended its check early: every check of a correct
    implementation read as "its transcript ended before the check did"."""
    assert weight(answer) == units


class _StopsWhenRecording:
    """A check whose implementation's side stops in code only that side runs (as a bug in
    kvfuzz's recording, or a patch the implementation made in its process, would)."""

    name = "toy"

    @staticmethod
    def check(item, impl, device="cpu"):
        from kvfuzz.fuzz.engine.transcript import recording

        counter = impl.load()(5)
        counter.add(1)
        if recording():
            raise KeyError("only on the recording side")
        return counter.add(2)


def test_a_transcript_that_ends_early_says_what_stopped_its_side():
    from kvfuzz.fuzz.engine.transcript import record_check

    from kvfuzz.impl.registry import YOURS, Implementation, set_loader

    toy, sent = Implementation("toy", "toy", "toy:Counter", "test double", YOURS), []
    record_check(_StopsWhenRecording, None, toy, "cpu", ("toy:Counter", Counter), 1 << 30,
                 sent.append)
    records = [record for message in sent for record in read_batch(message)[0]]
    set_loader(Replay(records, 1 << 30).load)
    try:
        with pytest.raises(Ended, match="ended before the check did; its process says that side "
                                        "of the check stopped on .*KeyError: 'only on the "
                                        "recording side'") as ended:
            _StopsWhenRecording.check(None, toy)
    finally:
        set_loader(None)
    assert ended.value.kind == "protocol"  # the verdict is the implementation's, as before
