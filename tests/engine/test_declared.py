"""Outside implementations declared as users write them (tests/engine/outside/): a class says
what it supports (`__kvfuzz__`, or `--impl path@name+name`), an upstream class re-exported
under a user's import path keeps its catalogue entry, a user's module that imports SGLang loads,
and `kvfuzz --version` says what a report depends on."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvfuzz import api as kvfuzz_api
from kvfuzz.fuzz.cli.main import main
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.paged import POW2
from kvfuzz.impl.registry import YOURS, Implementation, ImplementationError
from kvfuzz.strategies.allocator.profile import PAGE_SIZE_2_UP
from tests.engine.outside import declares
from tests.forked import kvfuzz_forked
from tests.helpers import needs_engine, summary_rows

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = "tests.engine.outside"


def _outside(target: str, path: str) -> Implementation:
    return Implementation(path, target, path, "outside implementation", YOURS)


def test_a_class_declares_its_preconditions_by_name():
    catalogue = TARGETS["allocator"].catalogue
    path = f"{OUTSIDE}.declares:NoPageSizeOne"
    impl = catalogue.declared(_outside("allocator", path), declares.NoPageSizeOne)
    assert impl.preconditions == (PAGE_SIZE_2_UP,)
    assert catalogue.declared(_outside("allocator", path), declares.Undeclared).preconditions \
        == ()


def test_a_class_handed_over_as_an_object_declares_the_same():
    impl = kvfuzz_api.implementation("allocator", declares.NoPageSizeOne)
    assert impl.preconditions == (PAGE_SIZE_2_UP,)
    assert kvfuzz_api.implementation("allocator", declares.Undeclared).preconditions == ()


@pytest.mark.parametrize("cls, says", [
    (declares.DeclaresNonsense, "__kvfuzz__: allocator has no precondition 'works_on_tuesdays' "
                                "(known: page_size_2_up, token_interface"),
    (declares.DeclaresBadly, "__kvfuzz__ is ['page_size_2_up']; expected {'preconditions'")])
def test_a_declaration_kvfuzz_cannot_read_is_a_one_line_error(cls, says):
    with pytest.raises(ImplementationError, match=r".*") as raised:
        TARGETS["allocator"].catalogue.declared(_outside("allocator", "m:C"), cls)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_an_entry_is_matched_by_where_its_object_is_defined():
    """A function re-exported under a user's path (here a stand-in defined where kvfuzz's
    Triton kernel is) keeps that entry's preconditions: power-of-two page sizes only."""
    def kernel():
        pass
    kernel.__module__, kernel.__qualname__ = "kvfuzz.impl.paged.triton_kernels", "alloc_extend"
    impl = TARGETS["extend"].catalogue.declared(_outside("extend", "mypkg.ops:fast"), kernel)
    assert impl.preconditions == POW2


def test_version_names_what_a_report_depends_on(capsys):
    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    out = capsys.readouterr().out
    assert ended.value.code == 0 and out.startswith("kvfuzz 0.1.0 (Python 3.")
    assert "torch 2.13.0" in out and "sglang " in out and "vllm " in out


def kvfuzz(*args):
    return subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # kvfuzz processes (forked from this one: the declarations, not start-up)
@pytest.mark.parametrize("spec, status", [
    ("declares:NoPageSizeOne", 0),             # declared: no page-size-1 trace, agrees
    ("declares:Undeclared", 1),                # the same class, not declared: diverges
    ("declares:Undeclared@page_size_2_up", 0),  # declared on the command line
    ("declares:DedupBugDeclared", 1)])         # a declaration hides no real bug
def test_what_a_class_declares_decides_its_traces(spec, status, tmp_path):
    result = kvfuzz_forked("diff", "allocator", "--impl", f"{OUTSIDE}.{spec}", "--cases", 100,
                           "--corpus", tmp_path)
    assert result.returncode == status, result.stderr[-3000:]
    if status:  # the replay line keeps the declaration
        saved = next(tmp_path.iterdir())
        again = kvfuzz_forked("replay", saved, "--impl", f"{OUTSIDE}.{spec}")
        assert again.returncode == 1, again.stdout


@pytest.mark.slow
def test_an_unknown_name_on_the_command_line_is_a_one_line_error(tmp_path):
    result = kvfuzz("diff", "allocator", "--impl", f"{OUTSIDE}.declares:Undeclared@nope",
                    "--cases", 5, "--corpus", tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "allocator has no precondition 'nope' (known: page_size_2_up" in result.stderr


def _marked(marks):
    def apply(test):
        for mark in marks:
            test = mark(test)
        return test
    return apply


@_marked(needs_engine("sglang"))
def test_a_reexported_upstream_class_keeps_its_entry_and_its_module_loads(tmp_path):
    """A user's module that imports SGLang's allocator once failed to load ("operator
    torchvision::nms does not exist": only paths starting with sglang or vllm were prepared),
    and, loaded, got page-size-1 traces the class does not support and diverged at once.
    Without its entry, 30 traces of seed 0 hold 7 of page size 1, the first at index 1 (100
    held 22, for 6 CPU s more); the class's agreement on 500 seeded traces is
    tests/allocator/test_upstream.py's."""
    result = kvfuzz("diff", "allocator", "--impl", f"{OUTSIDE}.reexports:Allocator", "--cases",
                    30, "--corpus", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert summary_rows(result.stderr)[f"{OUTSIDE}.reexports:Allocator"][:4] == \
        ["30", "30", "0", "no"]


def test_the_guide_names_every_declarable_precondition():
    """docs/use-in-your-ci.md's table: each target's names, no more, no fewer."""
    text = (ROOT / "docs" / "use-in-your-ci.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 2 and cells[0] and cells[0] not in ("target", "---"):
            for name in cells[0].split(", "):
                rows[name] = set(re.findall(r"(?:^|, )`(\w+)`", cells[1]))
    for name, target in TARGETS.items():
        assert rows.get(name) == set(target.catalogue.declarable or {}), name
