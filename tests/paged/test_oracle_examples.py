"""The upstream worked examples (spec §1.4 and §7) as tests of the oracle itself."""

from __future__ import annotations

import pytest

from kvfuzz.oracle.paged.contract import POOL_SHORT, pages_needed, violations
from kvfuzz.oracle.paged.model import decode_slots, extend_slots
from kvfuzz.strategies.paged.case import Case

P = 4

# (prefix, seq, last_loc, free_pages, expected slots): test_allocator_cpu.py naive cases, P = 4.
SINGLE_REQUEST = [
    (2, 4, 1, [], [2, 3]),                       # phase 1 only; an empty pool must work
    (0, 8, -1, [5, 6], list(range(20, 28))),
    (4, 7, 3, [3], [12, 13, 14]),
    (2, 8, 1, [3], [2, 3, 12, 13, 14, 15]),
    (2, 7, 1, [3], [2, 3, 12, 13, 14]),
    (4, 11, 3, [2, 3], [8, 9, 10, 11, 12, 13, 14]),
    (2, 11, 1, [3, 4], [2, 3, 12, 13, 14, 15, 16, 17, 18]),
    (2, 11, 1, [1, 2, 3], [2, 3, 4, 5, 6, 7, 8, 9, 10]),   # §1.4, fresh allocator
    (5, 5, 4, [7], []),                          # zero-length extend
]


@pytest.mark.parametrize("prefix, seq, last, pool, expected", SINGLE_REQUEST)
def test_single_request_examples(prefix, seq, last, pool, expected):
    result = extend_slots([prefix], [seq], [last], pool, P)
    assert result.slots == expected
    assert result.pages_used == sum(1 for slot in expected if slot % P == 0 and slot // P in pool)


def test_batch_after_alloc_consumes_pages_in_request_order():
    # §1.4: after alloc(8) took pages 1 and 2, the pool head is [3, 4, ...].
    result = extend_slots([1, 3], [6, 7], [4, 10], [3, 4, 5, 6], P)
    assert result.slots == [5, 6, 7, 12, 13, 11, 16, 17, 18]
    assert result.pages_used == 2


def test_two_fresh_requests_get_eight_unique_slots():
    result = extend_slots([0, 0], [4, 4], [-1, -1], [1, 2], P)
    assert sorted(result.slots) == list(range(4, 12))


def test_page_size_one_gives_one_page_per_token():
    assert extend_slots([3], [6], [9], [7, 2, 5], 1).slots == [7, 2, 5]


def test_decode_inside_page_and_crossing_a_boundary():
    # seq 6: token 5 continues page of slot 20; seq 5: token 4 opens a page; seq 9 likewise.
    result = decode_slots([6, 5, 9], [20, 15, 40], [7, 8], P)
    assert result.slots == [21, 28, 32]
    assert result.pages_used == 2


def test_decode_within_page_consumes_no_page():
    assert decode_slots([3], [10], [], P).pages_used == 0


def test_pages_needed_is_the_ceil_formula_and_counts_page_size_one_decode():
    extend = Case("extend", P, (11, 7), (1, 10), (), prefix_lens=(2, 3))
    assert pages_needed(extend) == (3 - 1) + (2 - 1)
    # Upstream get_num_new_pages(decode=True) returns 0 for P == 1 (spec §3); the exact count is 1.
    decode = Case("decode", 1, (5,), (3,), ())
    assert pages_needed(decode) == 1


def test_short_pool_is_outside_the_contract():
    case = Case("extend", P, (11,), (1,), (3,), prefix_lens=(2,))
    assert [v.kind for v in violations(case)] == [POOL_SHORT]


def test_empty_pool_is_inside_the_contract_when_no_page_is_needed():
    assert violations(Case("extend", P, (4,), (1,), (), prefix_lens=(2,))) == []
