"""Judging one paged extend/decode call against the oracle.

- A case outside the contract (oracle.paged.contract.violations) is never compared. What the
  implementation did with it is recorded ("raised IndexError", "returned garbage") so a summary
  shows, e.g., which implementations fail loudly on a pool shorter than the demand.
- A case inside the contract must produce exactly the oracle's slots, leave every input tensor
  untouched and raise nothing; any difference is a divergence naming the first differing slot,
  its request, token position and phase.
"""

from __future__ import annotations

import traceback

from kvfuzz.fuzz.engine.remote import apply
from kvfuzz.fuzz.engine.report import note_raised
from kvfuzz.fuzz.engine.target import AGREE, DIVERGE, OUTSIDE_CONTRACT, Outcome
from kvfuzz.fuzz.engine.transcript import recording
from kvfuzz.impl.paged.calling import UNWRITTEN, call
from kvfuzz.impl.registry import Implementation, safe_text
from kvfuzz.oracle.paged.contract import violations
from kvfuzz.oracle.paged.model import Expected, expected_for, owner_of
from kvfuzz.strategies.paged.case import Case
from kvfuzz.strategies.paged.edges import edge_classes


def check(target, case: Case, impl: Implementation, device: str = "cpu") -> Outcome:
    """Judge one call of `impl` on `case` (`target` builds the divergence)."""
    fn = impl.load()
    found = violations(case, impl.preconditions)
    if found:
        behaviour = behaviour_outside(fn, case, device) if impl.safe_outside_contract \
            else "not run"
        return Outcome(OUTSIDE_CONTRACT, outside=tuple(v.kind for v in found), behaviour=behaviour)
    if recording():  # the implementation's side: its one request is the call (no oracle)
        try:
            apply(call, fn, case, device)
        except (Exception, SystemExit):
            pass
        return Outcome(AGREE)  # not read: the judge concludes from its replay
    expected = expected_for(case)
    edges = edge_classes(case)
    try:
        result = apply(call, fn, case, device)
    except (Exception, SystemExit) as error:  # any raise on a valid case is a divergence
        return Outcome(DIVERGE, _raised(target, impl, case, expected, error), features=edges)
    if result.out_changed:  # the caller's buffer is not what it handed over any more
        return Outcome(DIVERGE, target.divergence(
            case, impl, "output buffer changed",
            [("expected", f"{len(expected.slots)} int64 slots written in place"),
             ("actual", result.out_changed)], ("output buffer changed", "")), features=edges)
    divergence = compare(target, impl, case, expected, result.slots)
    if divergence is None and result.mutated_inputs:
        divergence = target.divergence(
            case, impl, "mutated input",
            [("expected", "inputs unchanged"),
             ("actual", f"changed {', '.join(result.mutated_inputs)}")], ("mutated input", ""))
    return Outcome(DIVERGE if divergence else AGREE, divergence, features=edges)


def compare(target, impl: Implementation, case: Case, expected: Expected, actual: list[int]):
    """The first slot where `actual` differs from the oracle, as a divergence (or None)."""
    values = expected.slots
    if values == actual:
        return None
    first = next(i for i, (e, a) in enumerate(zip(values, actual)) if e != a)
    slot = owner_of(case, first)
    unwritten = actual[first] == UNWRITTEN
    kind = "not written" if unwritten else "wrong slot"
    prefix = case.prefixes()[slot.rid]
    lines = [("phase", slot.phase), ("expected", str(values[first])),
             ("actual", "(not written)" if unwritten else str(actual[first])),
             ("request", f"{slot.rid}: prefix {prefix}, seq {case.seq_lens[slot.rid]}, "
                         f"last_loc {case.last_loc[slot.rid]}"),
             ("pages", _pages_text(case, expected, actual)),
             ("differing", f"{sum(e != a for e, a in zip(values, actual))} of {len(values)} "
                           f"slots")]
    where = f"output slot {first}: request {slot.rid}, token position {slot.position}"
    return target.divergence(case, impl, f"{kind} at {where}", lines, (kind, slot.phase))


def _pages_text(case: Case, expected: Expected, actual: list[int]) -> str:
    """Which pool entries the output uses, against the head slice the contract consumes."""
    position_of = {page: i for i, page in enumerate(case.free_pages)}
    used = sorted({position_of[s // case.page_size] for s in actual
                   if s != UNWRITTEN and s // case.page_size in position_of})
    shown = used if len(used) <= 12 else used[:12] + ["..."]
    return f"expected free_pages[0:{expected.pages_used}]; actual uses pool positions {shown}"


def _raised(target, impl, case: Case, expected: Expected, error: Exception):
    note_raised(error)
    frames = traceback.extract_tb(error.__traceback__)
    at = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else "?"
    at = getattr(error, "remote_at", at)  # raised in the implementation's own process
    message = safe_text(error).partition(": ")[2]
    return target.divergence(
        case, impl, "raised",
        [("expected", f"{len(expected.slots)} slots"),
         ("actual", f"{type(error).__name__}: {message}"[:300]), ("raised at", at)],
        ("raised", ""))


def behaviour_outside(fn, case: Case, device: str) -> str:
    """What an implementation does with a case outside the contract, in a countable phrase."""
    try:
        result = apply(call, fn, case, device)
    except (Exception, SystemExit) as error:
        return f"raised {type(error).__name__}"
    slots = result.slots
    unwritten = sum(s == UNWRITTEN for s in slots)
    duplicated = len(slots) - unwritten - len({s for s in slots if s != UNWRITTEN})
    if unwritten or duplicated:
        return "returned garbage (duplicated or unwritten slots)"
    return "returned distinct slots"
