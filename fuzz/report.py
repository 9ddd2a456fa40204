"""Divergence reports: what a person needs at 2 a.m., and a signature to deduplicate by.

A signature is what diverged (target, kind, field, phase), never a stack trace: every
differential failure is the same "expected != actual" assert, so stacks would merge them all.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from kvfuzz.strategies.paged.case import Case


class Mismatch(AssertionError):
    """An implementation disagreed with the oracle; carries the report."""

    def __init__(self, divergence: "Divergence"):
        super().__init__(divergence.report())
        self.divergence = divergence


@dataclass
class Divergence:
    impl: str
    case: Case
    kind: str             # "raised", "wrong slot", "not written", "mutated input"
    expected: str
    actual: str
    where: str = ""       # e.g. "output slot 37: request 2, token position 18"
    phase: str = ""       # the oracle's phase of the first differing slot
    details: list[str] = field(default_factory=list)
    saved_path: str | None = None

    def signature(self) -> tuple[str, str, str, str]:
        return (self.case.target, self.impl, self.kind, self.phase)

    def headline(self) -> str:
        where = f" at {self.where}" if self.where else ""
        phase = f" ({self.phase})" if self.phase else ""
        return (f"{self.case.target} {self.impl}: {self.kind}{where}{phase}: "
                f"expected {self.expected}, actual {self.actual}")

    def replay_command(self) -> str:
        path = self.saved_path or f"<case {self.case.case_id()}>"
        return f"kvfuzz replay {shlex.quote(path)} --impl {shlex.quote(self.impl)}"

    def report(self) -> str:
        case = self.case
        origin = f"  ({case.origin.describe()})" if case.origin else ""
        lines = [
            f"DIVERGENCE  {case.target}  implementation {self.impl}",
            f"  case      {case.case_id()}{origin}" + (f"  {case.note}" if case.note else ""),
            f"  batch     {case.batch_size} requests, page_size {case.page_size}, "
            f"{len(case.free_pages)} free pages, output length {case.output_length()}",
            f"  what      {self.kind}" + (f" at {self.where}" if self.where else ""),
        ]
        if self.phase:
            lines.append(f"  phase     {self.phase}")
        lines += [f"  expected  {self.expected}", f"  actual    {self.actual}"]
        lines += [f"  {line}" for line in self.details]
        lines.append(f"  replay    {self.replay_command()}")
        return "\n".join(lines)
