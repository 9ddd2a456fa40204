"""A mutant that says whether it ran: its mutated file compiled with one statement added just
before the statement that holds the edit, `__kvfuzz_mutant_ran__[0] = True`, at that statement's
position (no other line moves). A child reads the flag after its cases: no trace function, which
on Python 3.11 runs every frame deoptimized (a whole run about twice as slow; `reach.LinesRun`
is the fallback where no statement holds the edit).

"Ran" is its statement reached: for an edit in an `if`, `elif` or `while` test, a `for`'s
iterable, or an `except` clause's type (the `try` statement holds it), that statement started."""

from __future__ import annotations

import ast
import builtins
import types

MARK = "__kvfuzz_mutant_ran__"  # a builtin in the child only; dunder-ended: never mangled
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def marked(source: str, path: str, line: int, column: int) -> types.CodeType | None:
    """`source` (a mutated file) compiled with the marker before the innermost statement of a
    function body that holds (line, column: 0-based, in characters); None where no function's
    statement does."""
    tree = ast.parse(source, path)
    text = source.splitlines()[line - 1] if 0 < line <= source.count("\n") + 1 else ""
    offset = len(text[:column].encode())  # a mutant's column counts characters, ast's bytes
    found = _holder(tree, (line, offset), in_function=False)
    if found is None:
        return None
    body, index = found
    statement = body[index]
    marker = ast.parse(f"{MARK}[0] = True").body[0]
    for node in ast.walk(marker):  # at the statement's own place: line tables unchanged after it
        node.lineno = node.end_lineno = statement.lineno
        node.col_offset = node.end_col_offset = statement.col_offset
    body.insert(index, marker)
    return compile(tree, path, "exec")


def arm() -> list:
    """The flag the marker sets, `[False]` until it runs. A builtin, not the module's global: a
    function defined in the file may run with other globals, and a marker that raised NameError
    there would read as the mutant's crash."""
    flag = [False]
    setattr(builtins, MARK, flag)
    return flag


def _holder(node: ast.AST, position: tuple, in_function: bool):
    """(the statement list, index) of the innermost statement inside a function that holds
    `position`, or None."""
    best = None
    for body in _statement_lists(node):
        for index, statement in enumerate(body):
            start = (statement.lineno, statement.col_offset)
            end = (statement.end_lineno, statement.end_col_offset)
            if not start <= position <= end:
                continue
            if in_function:
                best = (body, index)
            deeper = _holder(statement, position,
                             in_function or isinstance(statement, _FUNCTIONS))
            return deeper or best
    return best


def _statement_lists(node: ast.AST):
    """Every list of statements directly under `node`: bodies, `else` and `finally` blocks,
    exception handlers' and match cases' bodies."""
    for field in ("body", "orelse", "finalbody"):
        value = getattr(node, field, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            yield value
    for part in getattr(node, "handlers", []) + getattr(node, "cases", []):
        yield part.body
