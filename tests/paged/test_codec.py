"""The paged case format: seeded generators pinned forever, and the JSON codec."""

from __future__ import annotations

import pytest

from kvfuzz.strategies.inputs import FormatError
from tests.helpers import dumps, loads
from kvfuzz.strategies.paged.generators import generate

# Case k of seed s is the same forever: a change here means a generator changed behaviour and
# must bump its version (GENERATORS in strategies/paged/generators.py), not alter old seeds.
PINNED = {
    ("extend", 0, 0): "909f352be2342775",
    ("extend", 1, 12345): "760104a3339d6545",
    ("decode", 0, 0): "2298e7a60ab6db2e",
    ("decode", 3, 777): "4a02d05b746def53",
}


@pytest.mark.parametrize("target, seed, index", PINNED)
def test_generators_are_stable(target, seed, index):
    assert generate(target, seed, index).case_id() == PINNED[(target, seed, index)]


@pytest.mark.parametrize("target", ["extend", "decode"])
def test_json_round_trip_keeps_content_and_origin(target):
    for index in range(200):
        case = generate(target, 5, index)
        again = loads(dumps(case))
        assert again == case and again.origin == case.origin and again.note == case.note
        assert again.case_id() == case.case_id()


def test_codec_rejects_out_of_range_integers_with_field_name():
    text = dumps(generate("decode", 0, 0)).replace('"page_size": ',
                                                   '"page_size": 99999999999999999999 + ')
    with pytest.raises(FormatError):
        loads(text, "x.json")
    big = dumps(generate("decode", 0, 1)).replace('"free_pages": [',
                                                  '"free_pages": [9223372036854775808, ')
    with pytest.raises(FormatError, match=r"x.json: field 'free_pages\[0\]'"):
        loads(big, "x.json")
