"""Broken variants made by editing source text: ONE exact edit inside one function or method of a
module (ours, or an installed upstream one), written to a temporary file and imported under a
name of its own (`@triton.jit` needs a real file, and tracebacks then show the edited line).
An edit that no longer matches exactly once fails loudly, so a mutant catalogue cannot drift
silently from the code it breaks (a new upstream release, a rewritten kernel).
"""

from __future__ import annotations

import ast
import atexit
import functools
import importlib
import importlib.util
import logging
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvfuzz.impl.upstream_env import prepare_import, second_copy


@dataclass(frozen=True)
class Mutation:
    scope: str  # "function", or "Class.method"
    old: str
    new: str
    why: str

    def apply(self, source: str, where: str) -> str:
        start, end = _span(source, self.scope, where)
        body = source[start:end]
        found = body.count(self.old)
        if found != 1:
            raise RuntimeError(f"mutation {self.old!r} -> {self.new!r}: found {found} times in "
                               f"{self.scope} of {where} (expected 1); update the catalogue")
        return source[:start] + body.replace(self.old, self.new) + source[end:]


def _span(source: str, scope: str, where: str) -> tuple[int, int]:
    """Character offsets [start, end) of `scope` ("name" or "Class.method") in `source`."""
    lines = source.splitlines(keepends=True)
    body = ast.parse(source).body
    node = None
    for part in scope.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            raise RuntimeError(f"no {scope} in {where}")
        body = node.body
    start = sum(len(line) for line in lines[:node.lineno - 1])
    return start, sum(len(line) for line in lines[:node.end_lineno])


@functools.cache
def _directory() -> Path:
    path = Path(tempfile.mkdtemp(prefix="kvfuzz-mutants-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.cache
def mutant_module(module: str, mutation: Mutation, tag: str):
    """Module `module` with `mutation` applied, imported as `kvfuzz._mutants.<tag>`."""
    with prepare_import(module):
        original = importlib.import_module(module)
    source = mutation.apply(Path(original.__file__).read_text(), original.__file__)
    path = _directory() / f"{tag}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"kvfuzz._mutants.{tag}", path)
    loaded = importlib.util.module_from_spec(spec)
    # In sys.modules while it runs, as an import has it: a dataclass of a module with postponed
    # annotations looks its module up there (SGLang 0.5.12's memory_pool.MambaPool.State).
    sys.modules[spec.name] = loaded
    try:
        with second_copy(module):
            spec.loader.exec_module(loaded)
    except BaseException:
        del sys.modules[spec.name]
        raise
    if isinstance(getattr(original, "logger", None), logging.Logger):
        # The copy logs as the original does: under its name, at its level (vLLM's modules
        # make a logger named after the module, which the copy's name would leave unconfigured).
        loaded.logger = original.logger
    return loaded


def mutant_classes(module: str, cls: str, mutations: dict, tag: str):
    """A module `__getattr__` that builds the mutant class `name` (a key of `mutations`) from
    `module`'s installed source on first use: `__getattr__ = mutant_classes(...)`."""
    def attribute(name: str):
        if name not in mutations:
            raise AttributeError(name)
        return getattr(mutant_module(module, mutations[name], f"{tag}_{name}"), cls)
    return attribute
