"""First-order mutants of a source file: enumerated once (every position of every operator inside
a function body), each applied later on a fresh parse. A mutant's id is stable while its file is:
`module:line:column:Operator:occurrence` (the occurrence counts that operator's positions through
the file, in Cosmic Ray's walk order, so applying it finds the same node again)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import parso
from cosmic_ray.ast import ast_nodes

from kvfuzz.fuzz.engine.mutation.operators import operators


@dataclass(frozen=True)
class Mutant:
    id: str
    module: str
    path: str
    line: int
    end_line: int
    column: int
    operator: str
    occurrence: int   # among `operator`'s positions in the file
    index: int        # among `operator`'s positions at this node (e.g. +1 or -1)
    function: str     # qualified name of the function or method it is in
    cosmetic: bool = False  # inside a logging, warning or print call: no behaviour to check

    def describe(self) -> str:
        return f"{self.module}:{self.line} {self.function}: {self.operator}"


def _function(node) -> str | None:
    """Qualified name of the function whose body holds `node`, or None (module level, a class
    body, a signature or a decorator: code that runs when the module is imported)."""
    names, inside_body = [], False
    child, parent = node, node.parent
    while parent is not None:
        if parent.type in ("funcdef", "classdef"):
            if parent.type == "funcdef" and child is parent.children[-1] and not names:
                inside_body = True
            if parent.type == "funcdef" and names:
                names.append("<locals>")
            names.append(parent.name.value)
        child, parent = parent, parent.parent
    return ".".join(reversed(names)) if inside_body else None


# Calls whose arguments are messages, not behaviour: a mutant inside one is "cosmetic".
COSMETIC = ("logger", "logging", "log", "warnings", "print", "self.logger")


def _cosmetic(node, names) -> bool:
    """Whether `node` sits in a call of one of `names` (`logger.debug(...)`, `print(...)`)."""
    while node is not None and node.type not in ("funcdef", "classdef", "file_input"):
        if node.type in ("power", "atom_expr") and node.children[0].type == "name":
            callee = node.children[0].value
            if len(node.children) > 1 and node.children[1].type == "trailer" \
                    and node.children[1].children[0].value == ".":
                dotted = f"{callee}.{node.children[1].children[1].value}"
            else:
                dotted = callee
            if callee in names or dotted in names:
                return True
        node = node.parent
    return False


def enumerate_mutants(module: str, path: str, source: str, scopes=(), select=("*",),
                      cosmetic=COSMETIC) -> list:
    """Every mutant of `source` inside a function body whose qualified name is in `scopes` (a
    name or a prefix `Class.`; empty: every function), by operators matching `select` (globs);
    those inside calls named in `cosmetic` are marked so."""
    chosen = {name: op for name, op in operators().items()
              if any(fnmatch.fnmatchcase(name, pattern) for pattern in select)}
    counts = dict.fromkeys(chosen, 0)
    found = []
    for node in ast_nodes(parso.parse(source)):
        for name, op in chosen.items():
            positions = list(op.mutation_positions(node))
            for index, (start, end) in enumerate(positions):
                occurrence, counts[name] = counts[name], counts[name] + 1
                function = _function(node)
                if function is None or not _in_scope(function, scopes):
                    continue
                found.append(Mutant(f"{module}:{start[0]}:{start[1]}:{name}:{occurrence}",
                                    module, path, start[0], end[0], start[1], name, occurrence,
                                    index, function, _cosmetic(node, cosmetic)))
    return found


def _in_scope(function: str, scopes) -> bool:
    top = function.replace(".<locals>", "")
    return not scopes or any(top == s or top.startswith(s + ".") for s in scopes)


def apply(source: str, mutant: Mutant) -> tuple[str, str, str]:
    """(mutated source, the original line, the mutated line): `mutant` applied to a fresh parse
    of `source`. A source the id no longer matches raises ValueError."""
    op = operators()[mutant.operator]
    module = parso.parse(source)
    seen = 0
    for node in ast_nodes(module):
        positions = list(op.mutation_positions(node))
        if seen + len(positions) <= mutant.occurrence:
            seen += len(positions)
            continue
        if positions[mutant.index][0] != (mutant.line, mutant.column):
            break
        parent = node.parent
        replaced = op.mutate(node, mutant.index)
        if replaced is not node:
            if isinstance(replaced, parso.tree.Leaf):  # Cosmic Ray's new number drops the
                replaced.prefix, replaced.value = node.prefix, replaced.value.strip()  # prefix
            slot = parent.children.index(node)
            parent.children[slot] = replaced
            replaced.parent = parent
        mutated = module.get_code()
        return mutated, _line(source, mutant.line), _line(mutated, mutant.line)
    raise ValueError(f"mutant {mutant.id}: its source changed (no such position now)")


def _line(source: str, number: int) -> str:
    lines = source.splitlines()
    return lines[number - 1].strip() if 0 < number <= len(lines) else ""
