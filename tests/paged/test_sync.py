"""Host synchronisation as a testable property: the vectorized functions read nothing on the
host, and the per-request loop reads at least once per request (so the check can fail)."""

from __future__ import annotations

import pytest
import torch

from kvfuzz.impl.paged.calling import build_inputs, invoke
from kvfuzz.impl.host_sync import count_host_syncs
from kvfuzz.oracle.paged.contract import violations
from kvfuzz.strategies.paged.generators import generate
from tests.helpers import bundled

SYNC_FREE = ("torch.vectorized", "torch.three_phase")


def valid_cases(target: str, count: int, min_batch: int = 1):
    index = 0
    while count:
        case = generate(target, 7, index)
        index += 1
        if not violations(case) and case.batch_size >= min_batch and case.output_length():
            count -= 1
            yield case


def syncs_of(impl, case):
    inputs = build_inputs(case)
    with count_host_syncs() as syncs:
        invoke(impl.load(), case, inputs)
    return syncs


@pytest.mark.parametrize("target", ["extend", "decode"])
@pytest.mark.parametrize("name", SYNC_FREE)
def test_vectorized_functions_never_sync(target, name):
    impl = next(i for i in bundled(target) if i.name == name)
    for case in valid_cases(target, 60):
        syncs = syncs_of(impl, case)
        assert syncs.total == 0, f"{name} on case {case.case_id()}: {syncs.describe()}"


@pytest.mark.parametrize("target", ["extend", "decode"])
def test_loop_syncs_at_least_once_per_request(target):
    impl = next(i for i in bundled(target) if i.name == "torch.loop")
    for case in valid_cases(target, 20, min_batch=4):
        syncs = syncs_of(impl, case)
        assert syncs.total >= case.batch_size, syncs.describe()


SYNC_POINTS = {
    "item": lambda t: t[0].item(),
    "tolist": lambda t: t.tolist(),
    "bool": lambda t: bool(t[0]),
    "if on a tensor": lambda t: 1 if t[0] > 0 else 0,
    "index": lambda t: [0, 1, 2][t[0]],
    "slice bound": lambda t: t[: t[1]],
    "int": lambda t: int(t[0]),
    "nonzero": lambda t: t.nonzero(),
    "boolean mask": lambda t: t[t > 1],
    "unique": lambda t: torch.unique(t),
    "repeat_interleave without output_size": lambda t: torch.repeat_interleave(t, t),
}


@pytest.mark.parametrize("name", SYNC_POINTS)
def test_counter_sees_each_kind_of_host_sync(name):
    tensor = torch.tensor([1, 2, 1])
    with count_host_syncs() as syncs:
        SYNC_POINTS[name](tensor)
    assert syncs.total >= 1


def test_counter_ignores_shape_reads_and_sized_repeat_interleave():
    tensor = torch.tensor([1, 2, 1])
    with count_host_syncs() as syncs:
        _ = tensor.shape[0], tensor.numel()
        torch.repeat_interleave(tensor, tensor, output_size=4)
        torch.where(tensor > 1, tensor, -tensor)
    assert syncs.total == 0, syncs.describe()
