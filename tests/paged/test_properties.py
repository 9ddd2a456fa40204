"""Hypothesis properties: every bundled implementation agrees with the oracle on generated cases,
and the run fails if the strategy never reached one of the edge classes."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import event, given, settings

from kvfuzz.fuzz.engine.target import OUTSIDE_CONTRACT
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.oracle.paged.contract import POOL_SHORT, violations
from kvfuzz.strategies.paged.edges import CLASSES, edge_classes
from kvfuzz.fuzz.engine.report import Mismatch
from kvfuzz.strategies.paged.hypothesis_cases import (cases_outside_contract, decode_cases,
                                                    extend_cases)
from tests.helpers import bundled, run_property

STRATEGIES = {"extend": extend_cases, "decode": decode_cases}


def agreement_property(impl, strategy):
    """A hypothesis test of `impl` over `strategy`, and the edge classes it reached."""
    reached: Counter = Counter()

    @given(strategy())
    def agrees(case):
        outcome = TARGETS[case.target].check(case, impl)
        for name in outcome.features:
            event(name)
        reached.update(outcome.features)
        if outcome.divergence is not None:
            raise Mismatch(outcome.divergence)

    return agrees, reached


@pytest.mark.parametrize("target, impl", [(t, i) for t in STRATEGIES for i in bundled(t)],
                         ids=lambda x: getattr(x, "name", x))
def test_implementation_agrees_with_oracle(target, impl):
    agrees, reached = agreement_property(impl, STRATEGIES[target])
    run_property(agrees)
    assert sum(reached.values()), "no case inside the contract was generated"


@pytest.mark.slow  # 1,000 examples per target
@pytest.mark.parametrize("target", STRATEGIES)
def test_strategy_reaches_every_edge_class(target):
    # Generation only (no implementation call), so it can afford the examples Hypothesis needs:
    # its choices clump, and 150 examples may miss a class that 1,000 reach.
    reached: Counter = Counter()

    @given(STRATEGIES[target]())
    @settings(max_examples=1000)
    def collect(case):
        if not violations(case):
            reached.update(edge_classes(case))

    collect()
    missing = [name for name in CLASSES[target] if not reached[name]]
    assert not missing, f"edge classes never hit in this run: {missing}"


def outside_contract_property(target: str, impl):
    """Cases pushed outside the contract are classified and recorded, never compared."""
    @given(cases_outside_contract(target))
    @settings(max_examples=100)
    def classified(case):
        outcome = TARGETS[target].check(case, impl)
        if outcome.status != OUTSIDE_CONTRACT:
            # break_contract leaves a case unchanged when it has no room for the fault.
            assert case.note and outcome.divergence is None
        else:
            assert outcome.behaviour and outcome.divergence is None

    return classified


@pytest.mark.parametrize("target", STRATEGIES)
def test_cases_outside_the_contract_are_recorded_never_compared(target):
    outside_contract_property(target, bundled(target)[0])()


def test_outside_contract_property_catches_a_contract_check_blind_to_short_pools(monkeypatch):
    # The property's mutant: a contract check that lets a short pool through. The engine then
    # compares such a case: the oracle itself runs off the pool (IndexError), or the loop's
    # exception becomes a reported divergence (AssertionError).
    import kvfuzz.fuzz.paged.check as paged_check

    real = paged_check.violations
    monkeypatch.setattr(paged_check, "violations", lambda case, extra=(): [
        v for v in real(case, extra) if v.kind != POOL_SHORT])
    loop = next(impl for impl in bundled("extend") if impl.name == "torch.loop")
    with pytest.raises((AssertionError, IndexError)):
        outside_contract_property("extend", loop)()
