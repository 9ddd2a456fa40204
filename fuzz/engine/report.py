"""Divergence reports, one layout for every target: what a person needs at 2 a.m., and a
signature to deduplicate by.

    DIVERGENCE  <target>  implementation <impl>
      <noun>    <input id>  (<origin>)  <note>
      <the target's description of the input: one labelled line each>
      what      <what differs, and where>
      <labelled lines: expected, actual, and the context the target adds>
      replay    kvfuzz replay <file> --impl <impl>
      original  kvfuzz diff ...   (only for a shrunk input: regenerates the one first found)

A signature is what diverged (target, implementation, kind, ...), never a stack trace: every
differential failure is the same "expected != actual" assert, so stacks would merge them all.
"""

from __future__ import annotations

import shlex
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

# A crash's lines that say where it was (`isolation.crash_outcome`): kept in its file's note.
CRASH_LINES = ("op", "at", "stack")

_WATCHING: list[list] = []  # while `raised_here` runs: where the judges note a raise


@contextmanager
def raised_here():
    """Collects the exception behind the divergence of a check run in this process (the
    implementation's own, with its traceback): `kvfuzz replay --in-process` prints it whole and
    `--pdb` debugs it. Noted only while watched, so nothing keeps an exception's frames alive."""
    found: list = []
    _WATCHING.append(found)
    try:
        yield found
    finally:
        _WATCHING.remove(found)


def note_raised(error: BaseException) -> None:
    """A judge turns `error`, the implementation's, into a divergence (the last one noted is
    the divergence's: a check stops at its first)."""
    if _WATCHING:
        _WATCHING[-1][:] = [error]


class Mismatch(AssertionError):
    """An implementation disagreed with the oracle; carries the report."""

    def __init__(self, divergence: "Divergence"):
        super().__init__(divergence.report())
        self.divergence = divergence


@dataclass
class Divergence:
    target: str
    impl: str
    input: object                        # the target's input (a Case, a Trace, ...)
    input_id: str
    what: str                            # e.g. "wrong slot at output slot 3: request 3, ..."
    lines: list[tuple[str, str]]         # (label, text): expected, actual, context
    signature: tuple                     # (target, impl, kind, ...): dedup, and shrinking's "same"
    header: list[tuple[str, str]] = field(default_factory=list)  # the input, described
    noun: str = "case"
    step: int | None = None              # the failing op of a trace: shrinking cuts after it
    crash: str | None = None             # how the worker ended ("SIGSEGV", "timeout", ...)
    saved_path: str | None = None
    original: str | None = None          # the command that regenerates the unshrunk input
    implementation: object = None        # the `Implementation` itself, to run it again

    def file_name(self) -> str:
        return f"{self.target}-{self.input_id}.json"

    def headline(self) -> str:
        found = dict(self.lines)
        values = (f": expected {found['expected']}, actual {found['actual']}"
                  if "expected" in found and "actual" in found else "")
        return f"{self.target} {self.impl}: {self.what}{values}"

    def saved_input(self):
        """The input as its corpus file keeps it: for a crash, the note (free text) gains what
        the report says of where it was, so the file tells without a replay."""
        where = [f"{label} {text}" for label, text in self.lines if label in CRASH_LINES]
        if self.crash is None or not where:
            return self.input
        note = getattr(self.input, "note", "")
        return replace(self.input, note="\n".join([note] * bool(note) + [self.what] + where))

    def replay_command(self) -> str:
        path = self.saved_path or f"corpus/{self.file_name()}"
        return f"kvfuzz replay {shlex.quote(path)} --impl {shlex.quote(self.impl)}"

    def report(self, limit: int = 16) -> str:
        origin = getattr(self.input, "origin", None)
        # The note's first line: a crash's file keeps where it was on the lines after it.
        note = (getattr(self.input, "note", "").splitlines() or [""])[0]
        lines = [f"DIVERGENCE  {self.target}  implementation {self.impl}",
                 _line(self.noun, self.input_id + (f"  ({origin.describe()})" if origin else "")
                       + (f"  {note}" if note else ""))]
        lines += [_line(label, text) for label, text in self.header]
        lines.append(_line("what", self.what))
        lines += [_line(label, text) for label, text in self.lines[:limit]]
        if len(self.lines) > limit:
            lines.append(_line("...", f"and {len(self.lines) - limit} more"))
        lines.append(_line("replay", self.replay_command()))
        if self.original:
            lines.append(_line("original", self.original))
        return "\n".join(lines)


def _line(label: str, text: str) -> str:
    return f"  {label:<9} {text}" if len(label) <= 9 else f"  {label}: {text}"
