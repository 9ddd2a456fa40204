"""Tests about the repository itself: import rules, generator stability, the JSON codec."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from kvfuzz.strategies.paged.case import CaseFormatError, dumps, loads
from kvfuzz.strategies.paged.generators import generate

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(folder: str) -> dict[str, set[str]]:
    found = {}
    for path in (ROOT / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.removeprefix("kvfuzz.").split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.removeprefix("kvfuzz.").split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize("folder, forbidden", [
    ("oracle", {"torch", "impl", "fuzz", "triton", "numpy"}),
    ("impl", {"oracle", "fuzz"}),
    ("strategies", {"torch", "impl", "oracle", "fuzz", "triton"}),
])
def test_import_rules(folder, forbidden):
    offenders = {path: sorted(names & forbidden)
                 for path, names in imported_modules(folder).items() if names & forbidden}
    assert not offenders, f"{folder}/ must not import {sorted(forbidden)}: {offenders}"


def test_strategies_use_the_standard_library_and_hypothesis_only():
    allowed = set(sys.stdlib_module_names) | {"strategies", "hypothesis", "__future__"}
    offenders = {path: sorted(names - allowed)
                 for path, names in imported_modules("strategies").items() if names - allowed}
    assert not offenders


def test_registries_import_implementations_lazily():
    # Listing names must not import torch: every registry module imports only at use.
    for path in ("impl/registry.py", "impl/allocator_registry.py", "impl/compaction/__init__.py"):
        top_level = [node for node in ast.parse((ROOT / path).read_text()).body
                     if isinstance(node, (ast.Import, ast.ImportFrom))]
        modules = {getattr(node, "module", None) or node.names[0].name for node in top_level}
        assert not modules & {"torch", "triton", "impl.paged_torch"}, (path, modules)


# Case k of seed s is the same forever: a change here means a generator changed behaviour and
# must bump its version (GENERATORS in strategies/generators.py), not silently alter old seeds.
PINNED = {
    ("extend", 0, 0): "909f352be2342775",
    ("extend", 1, 12345): "760104a3339d6545",
    ("decode", 0, 0): "2298e7a60ab6db2e",
    ("decode", 3, 777): "4a02d05b746def53",
}


@pytest.mark.parametrize("target, seed, index", PINNED)
def test_generators_are_stable(target, seed, index):
    assert generate(target, seed, index).case_id() == PINNED[(target, seed, index)]


@pytest.mark.parametrize("target", ["extend", "decode"])
def test_json_round_trip_keeps_content_and_origin(target):
    for index in range(200):
        case = generate(target, 5, index)
        again = loads(dumps(case))
        assert again == case and again.origin == case.origin and again.note == case.note
        assert again.case_id() == case.case_id()


def test_codec_rejects_out_of_range_integers_with_field_name():
    text = dumps(generate("decode", 0, 0)).replace('"page_size": ', '"page_size": 99999999999999999999 + ')
    with pytest.raises(CaseFormatError):
        loads(text, "x.json")
    big = dumps(generate("decode", 0, 1)).replace('"free_pages": [', '"free_pages": [9223372036854775808, ')
    with pytest.raises(CaseFormatError, match=r"x.json: field 'free_pages\[0\]'"):
        loads(big, "x.json")
