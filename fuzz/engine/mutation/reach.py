"""Which lines of the mutated files the unmutated run executes: a mutant on none of its lines is
"not reached" (a gap in what kvfuzz drives, not in what it checks) and is not run."""

from __future__ import annotations

import sys
import threading


class LineTrace:
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

    def __enter__(self):
        self._saved = sys.gettrace()
        sys.settrace(self._global)
        threading.settrace(self._global)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._saved)
        threading.settrace(None)
        return False


def reached(lines: set, first: int, last: int) -> bool:
    return any(number in lines for number in range(first, last + 1))
