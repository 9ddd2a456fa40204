"""The prefix-cache readers' fast reads (`impl/radix/ints.py`, `impl/radix/reader.py`) answer
what the checked reads answer: a tensor subclass whose `tolist()` lies reads as what it holds, a
wrong dtype or shape is refused, the rows in one read are each row's own, and a tensor's span is
the bytes its elements occupy, for a view too."""

import pytest
import torch

from kvfuzz.impl.driver_calls import int_list as checked_int_list
from kvfuzz.impl.radix.ints import int_list, row_lists
from kvfuzz.impl.radix.reader import _span


class Lies(torch.Tensor):
    def tolist(self):
        return [0]


def test_exact_tensors_read_fast_and_anything_else_as_checked():
    slots = torch.tensor([3, 1, 2])
    assert int_list(slots) == checked_int_list(slots) == [3, 1, 2]
    assert int_list(slots.as_subclass(Lies)) == [3, 1, 2]  # not the subclass's [0]
    assert int_list(None) is None
    for wrong in (slots.int(), slots.view(1, 3), [3, 1, 2]):
        with pytest.raises(TypeError):
            int_list(wrong)


def test_rows_read_at_once_are_each_rows_own():
    table = torch.arange(40, dtype=torch.int32).view(4, 10)
    wanted = {7: (1, 3), 8: (3, 0), 9: (2, 10)}
    assert row_lists(table, wanted) == {rid: table[row, :n].tolist()
                                        for rid, (row, n) in wanted.items()}
    assert row_lists(table, {}) == {}
    found = row_lists(table, wanted)  # (numpy's view on the CPU: still Python ints)
    assert all(type(n) is int for row in found.values() for n in row)
    table[1, 0] = -7  # the memory read, not a copy taken once
    assert row_lists(table, wanted)[7] == [-7, 11, 12]


def test_a_span_is_its_elements_bytes_contiguous_or_not():
    base = torch.arange(12, dtype=torch.int64)
    start = base.data_ptr()
    assert _span(base[2:5]) == (start + 16, start + 40)
    assert _span(base[::3]) == (start, start + 10 * 8)  # a strided view: first to last element
    assert _span(base[:0]) is None and _span(None) is None
