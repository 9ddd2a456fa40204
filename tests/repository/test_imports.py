"""The shape of the code, checked on every run: no import cycle between the project's modules, no
import pointing up a layer (strategies < oracle, impl < fuzz < bench), oracle and impl never
importing each other, and the third-party rules of each layer. Each check is shown to fail on a
tree with the fault planted."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

from tests.repository.import_graph import cycles, read_graph, upward_imports

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def project_graph() -> dict[str, set[str]]:
    # read when a test asks, not at import: every pytest worker collects this module, and
    # parsing the whole tree cost each some 2 CPU s of its collection (2026-12-07)
    return read_graph(ROOT)


def test_the_graph_covers_every_layer():
    graph = project_graph()
    layers = {name.split(".")[1] for name in graph if name.count(".")}
    assert {"strategies", "oracle", "impl", "fuzz", "bench"} <= layers
    assert "kvfuzz.api" in graph and "kvfuzz.fuzz.engine.diff" in graph["kvfuzz.api"]  # the top
    assert "kvfuzz.fuzz.targets" in graph["kvfuzz.fuzz.engine.corpus"]


def test_no_import_cycle():
    assert cycles(project_graph()) == []


def test_no_import_points_up_a_layer_or_across_oracle_and_impl():
    assert upward_imports(project_graph()) == []


def _plant(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return read_graph(tmp_path)


def test_a_planted_cycle_is_found(tmp_path):
    graph = _plant(tmp_path, {
        "fuzz/a.py": "from kvfuzz.fuzz import b\n",
        "fuzz/b.py": "def f():\n    from kvfuzz.fuzz.c import g\n",  # inside a function too
        "fuzz/c.py": "import kvfuzz.fuzz.a\n",
        "fuzz/d.py": "from kvfuzz.fuzz.a import x\n"})
    assert cycles(graph) == [["kvfuzz.fuzz.a", "kvfuzz.fuzz.b", "kvfuzz.fuzz.c"]]


def test_planted_upward_and_crossing_imports_are_found(tmp_path):
    graph = _plant(tmp_path, {
        "fuzz/cli/main.py": "def bench():\n    import kvfuzz.bench.harness\n",
        "bench/harness.py": "from kvfuzz.fuzz.cli import main as cli\n",
        "oracle/model.py": "from kvfuzz.impl.registry import resolve\n",
        "impl/registry.py": "import torch\n"})
    assert upward_imports(graph) == ["kvfuzz.fuzz.cli.main -> kvfuzz.bench.harness",
                                     "kvfuzz.oracle.model -> kvfuzz.impl.registry"]


def _third_party(folder: str) -> dict[str, set[str]]:
    return {name: {i.split(".")[0] for i in imported} - {"kvfuzz"}
            for name, imported in project_graph().items() if name.startswith(f"kvfuzz.{folder}")}


@pytest.mark.parametrize("folder, forbidden", [
    ("oracle", {"torch", "triton", "numpy"}),  # the oracle reads like the spec: plain Python
    ("strategies", {"torch", "triton", "numpy"}),
])
def test_third_party_imports_of_a_layer(folder, forbidden):
    offenders = {name: sorted(names & forbidden)
                 for name, names in _third_party(folder).items() if names & forbidden}
    assert not offenders, f"{folder}/ must not import {sorted(forbidden)}: {offenders}"


def test_strategies_use_the_standard_library_and_hypothesis_only():
    allowed = set(sys.stdlib_module_names) | {"hypothesis", "__future__"}
    offenders = {name: sorted(names - allowed)
                 for name, names in _third_party("strategies").items() if names - allowed}
    assert not offenders


def test_catalogues_and_targets_import_nothing_heavy_at_module_level():
    # Listing names must not import torch: catalogues and target modules import only at use.
    import ast

    for path in [*ROOT.glob("impl/*/__init__.py"), *ROOT.glob("fuzz/*/target.py"),
                 ROOT / "impl/registry.py", ROOT / "fuzz/targets.py"]:
        top_level = [node for node in ast.parse(path.read_text()).body
                     if isinstance(node, (ast.Import, ast.ImportFrom))]
        modules = {getattr(node, "module", None) or node.names[0].name for node in top_level}
        assert not {m.split(".")[0] for m in modules} & {"torch", "triton"}, (path, modules)
