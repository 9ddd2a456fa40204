"""The import rules of style.md for the compaction modules, read from the sources with `ast`."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = {"impl", "oracle", "strategies", "fuzz", "tests"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _files(*patterns: str) -> list[Path]:
    return sorted(path for pattern in patterns for path in ROOT.glob(pattern))


@pytest.mark.parametrize("path", _files("oracle/compaction*.py"), ids=str)
def test_the_oracle_uses_neither_torch_nor_impl(path):
    assert not _imports(path) & {"torch", "numpy", "impl", "fuzz"}


@pytest.mark.parametrize("path", _files("impl/compaction/*.py", "impl/mutants/compaction.py"),
                         ids=str)
def test_impl_never_imports_the_oracle(path):
    assert not _imports(path) & {"oracle", "fuzz"}


@pytest.mark.parametrize("path", _files("strategies/compaction*.py"), ids=str)
def test_strategies_use_the_standard_library_only(path):
    outside = {name for name in _imports(path) - {"strategies", "__future__"}
               if name not in sys.stdlib_module_names}
    assert not outside


def test_listing_implementations_does_not_import_torch_code():
    from impl.compaction import IMPLEMENTATIONS
    assert "impl.compaction.allocator" not in sys.modules or IMPLEMENTATIONS
    source = (ROOT / "impl/compaction/__init__.py").read_text()
    top_level = [node for node in ast.parse(source).body if isinstance(node, ast.ImportFrom)]
    assert all(node.module == "__future__" for node in top_level)
