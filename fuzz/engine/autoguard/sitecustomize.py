"""Imported by Python at start-up in every process that `kvfuzz guard` starts (this folder is
first on its PYTHONPATH; `__init__.py` says why). Runs the `sitecustomize` it shadows, then
patches each construction site of `KVFUZZ_GUARD_SITES` when its module is imported. Standard
library only, and nothing of kvfuzz's is imported until an object is built."""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _run_shadowed() -> None:
    """The sitecustomize this one hides (a distribution's own), if any."""
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _sites() -> dict:
    """{module: [(global name, target)]} of KVFUZZ_GUARD_SITES ("module:name=target,...")."""
    sites = {}
    for item in filter(None, os.environ.get("KVFUZZ_GUARD_SITES", "").split(",")):
        where, _, target = item.partition("=")
        module, _, name = where.partition(":")
        sites.setdefault(module, []).append((name, target))
    return sites


def _patch(module, name: str, target: str) -> None:
    """`module.name` replaced by a stand-in whose objects come back guarded (a class by a class:
    `kvfuzz_stand_in.py`)."""
    original = getattr(module, name)

    def build(*args, **kwargs):
        from kvfuzz.fuzz.engine.autoguard import wrap

        return wrap(original(*args, **kwargs), target, kwargs)

    if not isinstance(original, type):
        build.__wrapped__ = original
        setattr(module, name, build)
        return
    from kvfuzz_stand_in import stand_in  # beside this file, first on the path

    setattr(module, name, stand_in(original, build))


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, sites):
        self.loader, self.sites = loader, sites

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        for name, target in self.sites:
            _patch(module, name, target)


class _SiteFinder(importlib.abc.MetaPathFinder):
    def __init__(self, sites: dict):
        self.sites = sites

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.sites:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, self.sites[fullname])
                return spec
        return None


_run_shadowed()
if _sites():
    sys.meta_path.insert(0, _SiteFinder(_sites()))
