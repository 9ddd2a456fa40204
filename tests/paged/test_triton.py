"""The Triton kernels against the oracle: on CPU through Triton's interpreter, and on a CUDA
machine (TRITON_INTERPRET unset) compiled on the GPU instead. Also: mutants are caught with a
readable report, and cases outside the contract are classified, never reported as mismatches.
Compiling for CUDA, upstream's kernels and the GPU-only tests: test_triton_compiled.py.

Case count per target: 500 (KVFUZZ_TRITON_CASES overrides; HYPOTHESIS_PROFILE=nightly: 5,000).
"""

from __future__ import annotations

import functools
import os
from collections import Counter

import pytest
import torch

import kvfuzz.impl.paged.triton_kernels as paged_triton
from kvfuzz.fuzz.engine.target import AGREE, DIVERGE, OUTSIDE_CONTRACT
from kvfuzz.fuzz.targets import TARGETS as BY_NAME
from kvfuzz.impl.paged.calling import build_inputs, call, invoke
from kvfuzz.impl.host_sync import count_host_syncs
from kvfuzz.impl.registry import MUTANT
from kvfuzz.impl.triton_env import interpreting
from kvfuzz.oracle.paged.contract import PAGE_SIZE_NOT_POW2, violations
from kvfuzz.strategies.paged.case import Case
from kvfuzz.strategies.paged.edges import CLASSES, edge_classes
from kvfuzz.strategies.paged.generators import generate
from tests.helpers import fail_with

TARGETS = ("extend", "decode")
PRECONDITIONS = ("power-of-two page size",)
NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"
NUM_CASES = int(os.environ.get("KVFUZZ_TRITON_CASES", 5000 if NIGHTLY else 500))
NUM_CHUNKS = 10  # xdist spreads test items, never the cases inside one
SEED = 0
DEVICE = "cpu" if interpreting() else "cuda"  # compiled kernels take device tensors only
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available() or interpreting(),
                                reason="needs a CUDA device and TRITON_INTERPRET unset")


@functools.cache
def selection(target: str) -> tuple[int, ...]:
    """Generator indices of the cases the kernels are tested on: the first NUM_CASES inside the
    Triton contract (power-of-two page size), with batches of 32+ requests capped at one in 60
    (the interpreter runs one program per request, ~5-10 ms each). Nightly runs take them all."""
    chosen, large, index = [], 0, 0
    while len(chosen) < NUM_CASES:
        case = generate(target, SEED, index)
        if not violations(case, PRECONDITIONS):
            if case.batch_size < 32 or NIGHTLY or large < NUM_CASES // 60:
                large += case.batch_size >= 32
                chosen.append(index)
        index += 1
    return tuple(chosen)


def triton(target: str):
    impl = BY_NAME[target].catalogue.resolve("triton")
    return impl, impl.load()


@pytest.mark.parametrize("target", TARGETS)
def test_selected_cases_reach_every_edge_class_a_triton_case_can(target):
    reached = Counter()
    for index in selection(target):
        reached.update(edge_classes(generate(target, SEED, index)))
    reachable = [name for name in CLASSES[target] if name != "P not a power of two"]
    assert [name for name in reachable if not reached[name]] == []


# The quick tier runs the first chunk of each target; the interpreter costs ~10 ms a request.
@pytest.mark.parametrize("target, chunk", [
    pytest.param(t, k, marks=pytest.mark.slow) if k else (t, k)
    for t in TARGETS for k in range(NUM_CHUNKS)])
def test_kernels_agree_with_oracle(target, chunk):
    impl, _ = triton(target)
    for index in selection(target)[chunk::NUM_CHUNKS]:
        outcome = BY_NAME[impl.target].check(generate(target, SEED, index), impl, DEVICE)
        if outcome.divergence is not None:
            fail_with(outcome.divergence)
        assert outcome.status == AGREE


@pytest.mark.parametrize("target", TARGETS)
def test_multi_step_prefix_sums_and_whole_page_loop(target, monkeypatch):
    # Batches here stay under 129 requests and extends under 6,145 tokens, so the production
    # steps (512 lanes, 1,024 slots) loop once; tiny steps make both loops iterate.
    monkeypatch.setattr(paged_triton, "BATCH_STEP", 4)
    monkeypatch.setattr(paged_triton, "BLOCK", 32)
    impl, _ = triton(target)
    cases = [generate(target, SEED, i) for i in selection(target)]
    small = [c for c in cases if 5 <= c.batch_size < 32 and c.output_length() <= 1000]
    assert target == "decode" or any(c.output_length() > 2 * 32 for c in small[:20])
    for case in small[:20]:
        outcome = BY_NAME[impl.target].check(case, impl, DEVICE)
        if outcome.divergence is not None:
            fail_with(outcome.divergence, save=False)


# Each mutant on a case it must fail, with the report's kind and phase (P = 4 unless stated).
MUTANT_CASES = {
    # Request 1 starts writing past its span: the first of its slots stays unwritten.
    "mutant.triton.inclusive_prefix": (
        Case("extend", 4, (4, 4), (-1, -1), (1, 2), prefix_lens=(0, 0)), "not written",
        "whole pages"),
    "mutant.triton.garbage_lanes": (
        Case("extend", 4, (4, 4), (-1, -1), (1, 2), prefix_lens=(0, 0)), "not written",
        "whole pages"),
    "mutant.triton.phase2_at_start": (
        Case("extend", 4, (8,), (5,), (3,), prefix_lens=(2,)), "wrong slot", "current page"),
    # The pool holds exactly the demand: one past the slice is past the pool, read as page 0.
    "mutant.triton.last_page_plus_one": (
        Case("extend", 4, (5,), (-1,), (3, 4), prefix_lens=(0,)), "wrong slot",
        "last partial page"),
    "mutant.triton.inclusive_rank": (Case("decode", 4, (5, 9), (7, 11), (7, 8)), "wrong slot",
                                     "new page"),
    "mutant.triton.counts_masked": (Case("decode", 1, (3, 5), (10, 20), (7, 8)), "wrong slot",
                                    "new page"),
}
TRITON_MUTANTS = [m for t in TARGETS for m in BY_NAME[t].catalogue.implementations
                  if m.kind == MUTANT
                  if m.path.startswith("kvfuzz.impl.paged.triton_mutants:")]


def test_every_triton_mutant_has_a_pinned_case():
    assert sorted(m.name for m in TRITON_MUTANTS) == sorted(MUTANT_CASES)


@pytest.mark.parametrize("mutant", TRITON_MUTANTS, ids=lambda m: m.name)
def test_mutant_fails_its_case_with_kind_and_phase(mutant):
    case, kind, phase = MUTANT_CASES[mutant.name]
    assert BY_NAME[case.target].check(case, triton(case.target)[0], DEVICE).status == AGREE
    outcome = BY_NAME[mutant.target].check(case, mutant, DEVICE)
    assert outcome.status == DIVERGE
    report = outcome.divergence.report()
    assert f"what      {kind} at output slot" in report, report
    assert f"phase     {phase}" in report, report
    assert f"--impl {mutant.name}" in report, report


@pytest.mark.parametrize("mutant", TRITON_MUTANTS, ids=lambda m: m.name)
def test_mutant_is_caught_by_the_seeded_cases(mutant):
    for index in selection(mutant.target):
        case = generate(mutant.target, SEED, index)
        outcome = BY_NAME[mutant.target].check(case, mutant, DEVICE)
        if outcome.status == DIVERGE:
            report = outcome.divergence.report()
            assert f"generator {mutant.target}/" in report and "phase     " in report, report
            return
    pytest.fail(f"{mutant.name} survived {len(selection(mutant.target))} seeded cases")


@pytest.mark.parametrize("target", TARGETS)
def test_page_size_not_a_power_of_two_is_outside_the_contract(target):
    impl, _ = triton(target)
    seen = 0
    for index in range(400):
        case = generate(target, SEED, index)
        if violations(case) or not case.page_size & (case.page_size - 1):
            continue  # inside the common contract, page size not a power of two
        outcome = BY_NAME[impl.target].check(case, impl, DEVICE)
        assert outcome.status == OUTSIDE_CONTRACT and outcome.divergence is None
        assert list(outcome.outside) == [PAGE_SIZE_NOT_POW2]
        assert outcome.behaviour == "raised ValueError"  # the wrapper's check, before a launch
        seen += 1
    assert seen >= 20


def test_short_pool_and_wrong_output_length_read_and_write_in_bounds():
    # Upstream reads past the pool (a segfault under the interpreter); ours masks every access
    # by its tensor's length, and page 0 stands in for a missing page.
    _, fn = triton("extend")
    short = Case("extend", 4, (8,), (-1,), (5,), prefix_lens=(0,))
    assert call(fn, short, DEVICE).slots == [20, 21, 22, 23, 0, 1, 2, 3]
    empty = Case("extend", 4, (8,), (-1,), (), prefix_lens=(0,))
    assert call(fn, empty, DEVICE).slots == [0, 1, 2, 3, 0, 1, 2, 3]
    assert call(fn, Case("extend", 4, (8,), (-1,), (5, 6), prefix_lens=(0,), out_len=3),
                DEVICE).slots == [20, 21, 22]
    _, decode = triton("decode")
    assert call(decode, Case("decode", 4, (5, 9), (7, 11), ()), DEVICE).slots == [0, 0]


@pytest.mark.parametrize("target", TARGETS)
def test_wrappers_never_sync_the_host(target):
    # Shape checks only, empty outputs and batches included (the GPU test checks the launch).
    impl, fn = triton(target)
    cases = [generate(target, SEED, i) for i in selection(target)[:6]]
    prefix = () if target == "decode" else ((),)
    cases.append(Case(target, 4, (), (), (1, 2), *prefix))
    for case in cases:
        inputs = build_inputs(case, DEVICE)
        with count_host_syncs() as syncs:
            invoke(fn, case, inputs, DEVICE)
        assert syncs.total == 0, syncs.describe()
