"""The mutation operators: Cosmic Ray's (`cosmic_ray.operators`, parso-based, one class per
replacement), and two of kvfuzz's on the same `Operator` interface for what Cosmic Ray lacks:
statement removal and slice bounds. docs/mutate.md says why Cosmic Ray and not mutmut.

Left out of Cosmic Ray's set: `VariableReplacer` and `VariableInserter` (random, so a mutant id
would not name one mutant), and `RemoveDecorator` (a decorator runs when its function is
defined; kvfuzz swaps a function's code in place, after definition)."""

from __future__ import annotations

import parso.python.tree as tree
from cosmic_ray.operators.operator import Example, Operator
from cosmic_ray.operators.provider import OperatorProvider

# Part of every results file's identity: a change to what an operator does starts runs over.
VERSION = 1
LEFT_OUT = {"VariableReplacer", "VariableInserter", "RemoveDecorator"}
# Statements whose removal is no mutant (a docstring, `pass`) or no longer compiles alone.
_KEPT = {"string", "import_name", "import_from", "global_stmt", "nonlocal_stmt"}
_KEPT_KEYWORDS = {"pass", "break", "continue"}  # break/continue: Cosmic Ray swaps them


def _leaf(text: str, like) -> tree.Name:
    """A leaf that prints `text` where `like` was (its prefix kept): only `get_code` reads the
    tree after a mutation, so one leaf may stand for an expression."""
    first = like.get_first_leaf()
    return tree.Name(text, first.start_pos, prefix=first.prefix)


class RemoveStatement(Operator):
    """A simple statement (an assignment, a call, a return, a raise, ...) does nothing. One that
    spans lines becomes a parenthesised `None` over as many lines, so later line numbers hold.
    One that calls `super()` becomes a bare `__class__`: the method still closes over its class
    (as `super()` made it), so its code can be swapped in place (`placing.py`)."""

    def mutation_positions(self, node):
        if node.type == "simple_stmt" and len(node.children) == 2:
            statement = node.children[0]
            if statement.type not in _KEPT and not (
                    statement.type == "keyword" and statement.value in _KEPT_KEYWORDS):
                yield (statement.start_pos, statement.end_pos)

    def mutate(self, node, index):
        statement = node.children[0]
        code = statement.get_code(include_prefix=False)
        lines = code.count("\n")
        word = "__class__" if "super(" in code else "None"
        text = "pass" if not lines and word == "None" else f"({word}" + "\n" * lines + ")"
        node.children[0] = _leaf(text, statement)
        node.children[0].parent = node
        return node

    @classmethod
    def examples(cls):
        return (Example("x = 1\n", "pass\n"),)


class ShiftSliceBound(Operator):
    """A slice bound moves by one: `a[i:j]` becomes `a[(i) + 1:j]`, `a[(i) - 1:j]`,
    `a[i:(j) + 1]`, `a[i:(j) - 1]` (off-by-one page and slot ranges)."""

    def mutation_positions(self, node):
        for _ in self._bounds(node):
            for _ in (1, -1):
                yield (node.start_pos, node.end_pos)

    def mutate(self, node, index):
        bound = self._bounds(node)[index // 2]
        sign = "+" if index % 2 == 0 else "-"
        text = f"({bound.get_code(include_prefix=False)}) {sign} 1"
        position = node.children.index(bound)
        node.children[position] = _leaf(text, bound)
        node.children[position].parent = node
        return node

    @staticmethod
    def _bounds(node) -> list:
        if node.type != "subscript":
            return []
        return [child for child in node.children
                if not (child.type == "operator" and child.value == ":")
                and child.type != "sliceop"]

    @classmethod
    def examples(cls):
        return (Example("a[i:j]", "a[(i) + 1:j]"),)


def operators() -> dict[str, Operator]:
    """Every operator kvfuzz applies, by name (the name is part of a mutant's id)."""
    provider = OperatorProvider()
    found = {name: provider[name]() for name in provider if name not in LEFT_OUT}
    found["RemoveStatement"] = RemoveStatement()
    found["ShiftSliceBound"] = ShiftSliceBound()
    return found
