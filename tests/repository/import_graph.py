"""The project's import graph, read from the sources with `ast` (nothing is imported): every
import statement, at module level or inside a function, is an edge. Used by test_imports.py."""

from __future__ import annotations

import ast
from pathlib import Path

# Folder -> layer. An import may only point at a lower layer or its own (oracle and impl are
# siblings that never import each other); the `kvfuzz` package itself sits on top.
LAYERS = {"strategies": 0, "oracle": 1, "impl": 1, "fuzz": 2, "bench": 3, "kvfuzz": 4}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] != "kvfuzz":
        parts.insert(0, "kvfuzz")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_graph(root: Path) -> dict[str, set[str]]:
    """{module: every name it imports} for the project's folders under `root`; a `from X import
    y` whose `X.y` is a project module counts as an import of `X.y`."""
    files = {module_name(root, path): path for folder in LAYERS if (root / folder).is_dir()
             for path in (root / folder).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module if node.level == 0 else \
                    ".".join(name.split(".")[:len(name.split(".")) - node.level] + [node.module])
                for alias in node.names:
                    imported.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in files
                                 else base)
        graph[name] = imported
    return graph


def layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "kvfuzz":
        return None
    return LAYERS[parts[1]] if len(parts) > 1 and parts[1] in LAYERS else LAYERS["kvfuzz"]


def folder(module: str) -> str:
    """The top-level folder a project module lives in ("" for the `kvfuzz` package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Edges that point up a layer, or across between oracle and impl."""
    found = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            if layer(target) is None or target.split(".")[:2] == module.split(".")[:2]:
                continue
            crossing = {folder(module), folder(target)} == {"oracle", "impl"}
            if layer(target) > layer(module) or crossing:
                found.append(f"{module} -> {target}")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a module importing itself):
    each is at least one import cycle (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    edges = {m: sorted(t for t in targets if t in graph) for m, targets in graph.items()}
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges[node]:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(edges[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found
