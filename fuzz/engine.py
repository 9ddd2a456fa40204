"""The differential engine: run one case through an implementation and the oracle, and judge.

Contract:
- A case outside the contract (oracle.contract.violations) is never compared. The engine records
  what the implementation did with it ("raised IndexError", "returned 5 duplicated slots") so a
  caller can see, e.g., which implementations fail loudly on a pool shorter than the demand.
- A case inside the contract must produce exactly the oracle's slots, leave every input tensor
  untouched and raise nothing; any difference is a `Divergence` naming the first differing slot,
  its request, token position and phase.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field

from kvfuzz.fuzz.report import Divergence
from kvfuzz.impl.paged.calling import UNWRITTEN, call
from kvfuzz.impl.registry import Implementation
from kvfuzz.oracle.paged.contract import Violation, violations
from kvfuzz.oracle.paged.model import Expected, expected_for, owner_of
from kvfuzz.strategies.paged.case import Case
from kvfuzz.strategies.paged.edges import edge_classes

AGREE, DIVERGE, OUTSIDE = "agree", "diverge", "outside contract"


@dataclass
class Outcome:
    status: str
    case: Case
    divergence: Divergence | None = None
    violations: list[Violation] = field(default_factory=list)
    behaviour: str = ""          # outside the contract: what the implementation did
    edges: set[str] = field(default_factory=set)


def check(impl: Implementation, fn, case: Case, device: str = "cpu") -> Outcome:
    """Judge one call of `fn` (the loaded `impl`) on `case`."""
    impl_name = impl.name
    found = violations(case, impl.preconditions)
    if found:
        behaviour = _behaviour(fn, case, device) if impl.safe_outside_contract else "not run"
        return Outcome(OUTSIDE, case, violations=found, behaviour=behaviour)
    expected = expected_for(case)
    edges = edge_classes(case)
    try:
        result = call(fn, case, device)
    except Exception as error:  # any exception on a valid case is a divergence
        return Outcome(DIVERGE, case, _raised(impl_name, case, expected, error), edges=edges)
    divergence = compare(impl_name, case, expected, result.slots)
    if divergence is None and result.mutated_inputs:
        divergence = Divergence(impl_name, case, "mutated input", "inputs unchanged",
                                f"changed {', '.join(result.mutated_inputs)}")
    return Outcome(DIVERGE if divergence else AGREE, case, divergence, edges=edges)


def compare(impl_name: str, case: Case, expected: Expected, actual: list[int]):
    """The first slot where `actual` differs from the oracle, as a Divergence (or None)."""
    values = expected.slots
    if values == actual:
        return None
    first = next(i for i, (e, a) in enumerate(zip(values, actual)) if e != a)
    slot = owner_of(case, first)
    unwritten = actual[first] == UNWRITTEN
    details = _request_context(case, slot.rid) + [_pages_line(case, expected, actual)]
    wrong = sum(e != a for e, a in zip(values, actual))
    details.append(f"differing {wrong} of {len(values)} slots")
    return Divergence(
        impl_name, case, "not written" if unwritten else "wrong slot",
        expected=str(values[first]), actual="(not written)" if unwritten else str(actual[first]),
        where=f"output slot {first}: request {slot.rid}, token position {slot.position}",
        phase=slot.phase, details=details)


def _request_context(case: Case, rid: int) -> list[str]:
    prefix = case.prefix_lens[rid] if case.target == "extend" else case.seq_lens[rid] - 1
    return [f"request   {rid}: prefix {prefix}, seq {case.seq_lens[rid]}, "
            f"last_loc {case.last_loc[rid]}"]


def _pages_line(case: Case, expected: Expected, actual: list[int]) -> str:
    """Which pool entries the output uses, against the head slice the contract consumes."""
    position_of = {page: i for i, page in enumerate(case.free_pages)}
    used = sorted({position_of[s // case.page_size] for s in actual
                   if s != UNWRITTEN and s // case.page_size in position_of})
    shown = used if len(used) <= 12 else used[:12] + ["..."]
    return (f"pages     expected free_pages[0:{expected.pages_used}]; "
            f"actual uses pool positions {shown}")


def _raised(impl_name: str, case: Case, expected: Expected, error: Exception) -> Divergence:
    frames = traceback.extract_tb(error.__traceback__)
    last = frames[-1] if frames else None
    at = f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno}" if last else "?"
    message = str(error).splitlines()[0] if str(error) else ""
    return Divergence(impl_name, case, "raised", f"{len(expected.slots)} slots",
                      f"{type(error).__name__}: {message}"[:300],
                      details=[f"raised at {at}"])


def _behaviour(fn, case: Case, device: str) -> str:
    """What an implementation does with a case outside the contract, in a countable phrase."""
    try:
        result = call(fn, case, device)
    except Exception as error:
        return f"raised {type(error).__name__}"
    slots = result.slots
    unwritten = sum(s == UNWRITTEN for s in slots)
    duplicated = len(slots) - unwritten - len({s for s in slots if s != UNWRITTEN})
    if unwritten or duplicated:
        return "returned garbage (duplicated or unwritten slots)"
    return "returned distinct slots"
