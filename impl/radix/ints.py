"""`driver_calls.int_list` with a fast path, for the prefix-cache readers, which read every
node's slots after every op (a few thousand tensors a trace).

`int_list` reads through torch's own methods with subclass overrides switched off, so that a
tensor subclass whose `tolist()` lies reads as what it holds; switching them off and back costs
some 5 us a tensor, most of a node's read. A tensor whose type is exactly `torch.Tensor` has no
override to switch off: its `tolist()` is torch's own, read directly (1 us). Anything else (a
subclass, another dtype or shape, not a tensor) goes through `int_list`, which reads or refuses
it as before."""

from __future__ import annotations

import torch

from kvfuzz.impl.driver_calls import int_list as checked_int_list

EXACT_TENSOR, _INT64 = torch.Tensor, torch.int64


def int_list(result):
    """`driver_calls.int_list(result)`: a 1-D int64 tensor as a list of ints, None as None."""
    if type(result) is EXACT_TENSOR and result.dtype is _INT64 and result.dim() == 1:
        return result.tolist()
    return checked_int_list(result)


def row_lists(table, wanted: dict) -> dict:
    """{key: table[row, :length] as ints} for `wanted` {key: (row, length)} (the driver's own
    int32 table, never the implementation's object): on the CPU through numpy's view of it,
    elsewhere one read of the rows up to the longest length, instead of a tensor and a read per
    row."""
    if not wanted:
        return {}
    if table.device.type == "cpu":
        # numpy's view of the same memory (no copy), each wanted row read alone: torch's
        # slice and `tolist()` of the whole table cost twice as much for the few live rows
        # of a trace, after every op
        rows = table.numpy()
        return {key: rows[row, :length].tolist() for key, (row, length) in wanted.items()}
    longest = max(length for _, length in wanted.values())
    whole = table[:, :longest].tolist()
    return {key: whole[row][:length] for key, (row, length) in wanted.items()}
