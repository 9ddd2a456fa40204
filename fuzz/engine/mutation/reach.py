"""Which lines of the mutated files run. Before any mutant: the unmutated run's, where a mutant on
none of its lines is "not reached" (a gap in what kvfuzz drives, not in what it checks) and is
not run. In a mutant's child: whether its own lines ran after it was placed (`LinesRun`, the
fallback of `marking.py`'s marker, which costs no trace), where a survivor whose lines never ran
there is rerun in a fresh process (`worker.py` says why)."""

from __future__ import annotations

import sys
import threading
import types


class _Tracing:
    """A trace function (`_global`, a subclass's) installed for this thread and new threads
    while in the `with` block, and the one before put back after it."""

    def _global(self, frame, event, arg):
        raise NotImplementedError

    def __enter__(self):
        self._saved = sys.gettrace()
        sys.settrace(self._global)
        threading.settrace(self._global)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._saved)
        threading.settrace(None)
        return False


class LineTrace(_Tracing):
    """`with LineTrace(paths) as trace:` ... then `trace.lines[path]`: the line numbers run."""

    def __init__(self, paths):
        self.lines = {path: set() for path in paths}

    def _global(self, frame, event, arg):
        lines = self.lines.get(frame.f_code.co_filename)
        if lines is None:
            return None  # no line events for code outside the files
        lines.add(frame.f_lineno)

        def local(frame, event, arg):
            if event == "line":
                lines.add(frame.f_lineno)
            return local
        return local


def reached(lines: set, first: int, last: int) -> bool:
    return any(number in lines for number in range(first, last + 1))


class LinesRun(_Tracing):
    """`with LinesRun(codes, first, last) as seen:` ... then `seen.ran`: whether any of lines
    `first`..`last` ran in one of `codes` (the code objects a mutant put in place, and those nested
    in them). Only frames of those codes are traced line by line, and tracing stops at the first
    hit; until then every frame runs deoptimized (Python 3.11), about twice as slow."""

    def __init__(self, codes, first: int, last: int):
        self._codes = {id(c): c for c in _nested(codes)}  # by identity: equal code is not ours
        self._lines = range(first, last + 1)
        self.ran = False

    def _global(self, frame, event, arg):
        if id(frame.f_code) not in self._codes:
            return None
        return self._local

    def _local(self, frame, event, arg):
        if event == "line" and frame.f_lineno in self._lines:
            self.ran = True
            sys.settrace(None)  # one hit answers the question; the rest runs untraced
            threading.settrace(None)
            return None
        return self._local


def _nested(codes) -> list:
    found, todo = [], list(codes)
    while todo:
        code = todo.pop()
        found.append(code)
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return found
