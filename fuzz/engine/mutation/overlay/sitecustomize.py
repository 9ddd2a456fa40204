"""Imported by Python at start-up in every process of `kvfuzz mutate --also-run`'s test command
(this folder is first on its PYTHONPATH). Runs the `sitecustomize` it shadows, then makes the
module KVFUZZ_MUTANT_MODULE execute the text of KVFUZZ_MUTANT_SOURCE (its file, mutated)
instead of its own file, compiled under the original file's name, so tracebacks and `__file__`
read as usual. Standard library only."""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _run_shadowed() -> None:
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


class _MutatedLoader(importlib.abc.Loader):
    def __init__(self, source_path: str):
        self.source_path = source_path

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        with open(self.source_path) as handle:
            source = handle.read()
        exec(compile(source, module.__file__, "exec"), module.__dict__)


class _MutatedFinder(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, source_path: str):
        self.name, self.source_path = name, source_path

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                spec.loader = _MutatedLoader(self.source_path)
                return spec
        return None


_run_shadowed()
if os.environ.get("KVFUZZ_MUTANT_MODULE") and os.environ.get("KVFUZZ_MUTANT_SOURCE"):
    sys.meta_path.insert(0, _MutatedFinder(os.environ["KVFUZZ_MUTANT_MODULE"],
                                           os.environ["KVFUZZ_MUTANT_SOURCE"]))
