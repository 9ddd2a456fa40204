"""Fuzzer bytes decode into valid cases that reach every edge class, and corpus cases encode
back into bytes that decode to themselves (how campaigns seed from the JSON corpus)."""

from __future__ import annotations

import random

import pytest

from kvfuzz.strategies.paged.bytes_chooser import BytesChooser, decode, encode
from kvfuzz.oracle.paged.contract import violations
from kvfuzz.strategies.paged.edges import CLASSES, edge_classes
from kvfuzz.strategies.paged.generators import generate

TARGETS = ("extend", "decode")


def _random_inputs(seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        yield rng.randbytes(rng.choice((0, 3, 16, 64, 256, 1024)))


@pytest.mark.parametrize("target", TARGETS)
def test_random_bytes_decode_into_valid_cases_reaching_every_edge_class(target):
    reached = set()
    for data in _random_inputs(seed=7, count=2500):
        case = decode(data, target)
        assert violations(case) == [], (data.hex(), case)
        reached |= edge_classes(case)
    assert set(CLASSES[target]) - reached == set()


@pytest.mark.parametrize("target", TARGETS)
def test_generated_cases_round_trip_through_encode(target):
    spelled = 0
    for index in range(300):
        case = generate(target, 3, index)
        data = encode(case)
        if data is None:  # only cases built outside the contract (or with an explicit out_len)
            assert violations(case) or case.out_len is not None
            continue
        spelled += 1
        assert decode(data, target) == case
    assert spelled >= 250


def test_exhausted_bytes_read_as_the_simplest_choices():
    chooser = BytesChooser(b"")
    assert chooser.integer(5, 9) == 5
    assert chooser.choice(("a", "b")) == "a"
    assert chooser.distinct(10, 20, 4) == [10, 11, 12, 13]
    assert chooser.shuffled([3, 1, 2]) == [3, 1, 2]
    assert decode(b"", "extend") == decode(b"", "extend")


def test_repeated_values_become_distinct_and_stay_in_range():
    chooser = BytesChooser(bytes([7] * 40))
    values = chooser.distinct(0, 9, 10)
    assert sorted(values) == list(range(10))


def test_a_provider_is_read_as_its_remaining_bytes():
    class Provider:  # the two FuzzedDataProvider methods the chooser uses
        def __init__(self, data):
            self.data = data

        def remaining_bytes(self):
            return len(self.data)

        def ConsumeBytes(self, count):
            return self.data[:count]

    data = bytes(range(64))
    assert decode(Provider(data), "decode") == decode(data, "decode")
