"""Implementations by name, for every target: one `Implementation` record per bundled
implementation, mutant or adapter (each target's catalogue is the `IMPLEMENTATIONS` tuple of its
`kvfuzz.impl.<target>` package), and outside code by import path `package.module:attr`.

A record names an import path that is resolved only when the implementation is used, so listing
or choosing one never imports torch, Triton or a user's package.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass

from kvfuzz.impl import sgl_kernel_stand_in
from kvfuzz.impl.upstream_env import prepare_import

OURS = "ours"          # kvfuzz's own implementation: run by default
UPSTREAM = "upstream"  # a released engine's class or function (through an adapter where needed)
MUTANT = "mutant"      # deliberately broken: the tests must kill it
YOURS = "yours"        # code given by import path or as an object, not in any catalogue
BASELINE = "baseline"  # a reference for benchmarks, not run by default
# Our Triton kernels: run only when named (--impl triton). Under the CPU interpreter a case costs
# tens of milliseconds, too slow for the default set every `kvfuzz diff` and seeded test runs.
KERNEL = "kernel"


class ImplementationError(ValueError):
    """A user named an implementation that does not exist or does not load; one-line message."""


class NotThere(ImplementationError):
    """The module or attribute an import path names does not exist (`missing`: which)."""

    def __init__(self, message: str, missing: str = ""):
        super().__init__(message)
        self.missing = missing


def safe_text(error: BaseException, limit: int = 300) -> str:
    """`Type: message` of someone else's exception, whose `__str__` may itself raise."""
    try:
        text = str(error)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        text = "(its message could not be read)"
    head = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return (head.splitlines() or [type(error).__name__])[0][:limit]


@dataclass(frozen=True)
class Implementation:
    name: str
    target: str
    path: str      # "package.module:attr", attr may be dotted
    summary: str
    kind: str = OURS
    # Preconditions beyond the target's common contract, by name (paged: e.g. Triton's
    # power-of-two page size): inputs violating them are outside this implementation's contract.
    preconditions: tuple[str, ...] = ()
    # A package it needs that kvfuzz does not install (e.g. "sglang"): without it, tests that
    # run it skip, and benchmarks leave it out.
    requires: str | None = None
    # False when a call outside the contract may crash the process (an out-of-bounds device
    # read): the engine then records "not run" instead of calling it.
    safe_outside_contract: bool = True
    # Run by `kvfuzz diff` without --impl, besides kvfuzz's own: an upstream class where the
    # target has no implementation of kvfuzz's (vLLM's block pool and manager).
    default: bool = False
    # What `kvfuzz mutate` edits by default ("module" or "module:Qualname"), where `path` is an
    # adapter of kvfuzz's around the code under test; empty: the function or class `path` names.
    mutates: tuple[str, ...] = ()
    # Where earlier releases of the `requires` package kept it ("module:attr"), tried in order
    # when `path`'s module does not exist (SGLang's allocators were one module before 0.5.13).
    earlier: tuple[str, ...] = ()

    @property
    def runs_by_default(self) -> bool:
        return self.kind == OURS or self.default

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path, *self.earlier)

    def available(self) -> bool:
        return self.requires is None or importlib.util.find_spec(self.requires) is not None

    def load(self):
        """The implementation itself, imported on first use and kept (a check calls this once
        per input). Where a loader is set (`set_loader`: a judge that runs implementations in
        processes of their own), what that loader gives for it."""
        if _LOADER:
            return _LOADER[0](self)
        loaded = _LOADED.get(self.path)
        if loaded is None:
            loaded = _LOADED[self.path] = load_first(self.paths, self.requires)
        return loaded


_LOADED: dict[str, object] = {}
_LOADER: list = []  # [loader] while one is set


def set_loader(loader) -> None:
    """`Implementation.load()` answers `loader(implementation)` from now on (None: imports in
    this process again)."""
    _LOADER[:] = [loader] if loader is not None else []


def loaded_here(path: str) -> bool:
    """Whether `path` is loaded in this process already (an object handed over, a module a
    test imported): then checking it here runs nothing new."""
    return path in _LOADED or path.partition(":")[0] in sys.modules


def register_object(obj) -> str:
    """A path for an implementation handed over as an object (kvfuzz's Python API): `load()`
    finds it in this process, and in the worker processes forked from it."""
    path = f"<object>:{id(obj)}"
    _LOADED[path] = obj
    return path


def entry(target: str, package: str, name: str, path: str, summary: str, kind: str = OURS,
          **options) -> Implementation:
    """A catalogue row: `path` is "module:attr" inside `package`."""
    return Implementation(name, target, f"{package}.{path}", summary, kind, **options)


def resolve(target: str, entries, spec: str) -> Implementation:
    """A registered name of `target`, or an outside implementation `package.module:attr` (not
    imported here: the target's catalogue has it imported and checked apart, so a typo or a
    missing package fails in one line before a run starts)."""
    if ":" in spec:
        for entry in entries:  # a registered path keeps its preconditions and safety
            if spec in entry.paths:
                return entry
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise ImplementationError(f"import path {spec!r}: expected package.module:attr")
        return Implementation(spec, target, spec, "outside implementation", YOURS)
    for entry in entries:
        if entry.name == spec:
            return entry
    known = ", ".join(entry.name for entry in entries) or "none"
    raise ImplementationError(f"unknown implementation {spec!r} for target {target!r} "
                              f"(known: {known}; or give package.module:attr)")


def check_shape(path: str, obj, positional: int, what: str, cls: bool = False,
                methods: tuple[str, ...] = (), keywords: tuple[str, ...] = ()) -> None:
    """An outside implementation must have the shape its target calls: a function (or, with
    `cls`, a class) taking `positional` arguments and the `keywords`, with `methods`. One-line
    error otherwise."""
    def fail(problem: str):
        raise ImplementationError(f"import path {path!r}: {problem}; expected {what}")

    if type(obj).__name__ in ("JITFunction", "InterpretedFunction", "Autotuner"):
        fail("is a raw Triton kernel, which takes a launch grid; wrap its launch in a function "
             "with the torch signature, as kvfuzz.impl.paged.upstream_sglang does")
    if cls != isinstance(obj, type):
        fail("is a class" if isinstance(obj, type) else f"is a {type(obj).__name__}, not a class")
    try:
        inspect.signature(obj).bind(*range(positional), **dict.fromkeys(keywords, 0))
    except TypeError as error:
        fail(f"cannot be called with {positional} positional arguments"
             + (f" and {', '.join(keywords)}" if keywords else "") + f" ({error})")
    except ValueError:
        pass  # no signature to read (a builtin): it is tried as it is
    missing = [name for name in methods if not callable(getattr(obj, name, None))]
    if missing:
        fail(f"has no method {', '.join(missing)}")


def load_first(paths: tuple[str, ...], requires: str | None = None):
    """The first of `paths` whose module exists, loaded (an earlier release's place is tried
    only where the current one is missing). When it is not there at all, for a class of a
    released engine (`requires`), one line says which release cannot be driven."""
    path, nowhere = paths[0], False
    if len(paths) > 1 and not module_exists(path.partition(":")[0]):
        path = next((p for p in paths[1:] if module_exists(p.partition(":")[0])), None)
        nowhere, path = path is None, path or paths[0]
    try:
        return load_attribute(path)
    except ImplementationError as error:
        release = installed_release(requires)
        needs = getattr(error, "needs", None)
        if release is None or not (needs or isinstance(error, NotThere)):
            raise
        if nowhere:  # none of the places the class was kept: each named
            modules = [p.partition(":")[0] for p in paths]
            raise ImplementationError(f"not supported: {requires} {release} has no module "
                                      f"{modules[0]}, nor {', nor '.join(modules[1:])}") from None
        # (a plain ImplementationError: it crosses back from the process that loads it apart)
        if needs:
            raise ImplementationError(
                f"not supported: {requires} {release}: {needs[0]} imports {needs[1]}, which is "
                f"not installed (kvfuzz installs no engine's compiled packages)") from None
        raise ImplementationError(f"not supported: {requires} {release} has no "
                                  f"{error.missing}") from None


def module_exists(name: str) -> bool:
    """Whether module `name` can be found (its parent packages are imported to look)."""
    try:
        with prepare_import(name):
            return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent that is a module, not a package, or absent
        return False


def installed_release(package: str | None) -> str | None:
    """The version of `package` that imports here (first on `sys.path`), or None."""
    if package is None:
        return None
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def load_attribute(path: str):
    """Import `package.module:attr` (attr may be dotted, e.g. `Class.method`)."""
    module_name, _, attr_path = path.partition(":")
    if not module_name or not attr_path:
        raise ImplementationError(f"import path {path!r}: expected package.module:attr")
    try:
        with prepare_import(module_name):
            obj = importlib.import_module(module_name)
    except ImplementationError:  # an adapter of kvfuzz's refusing the release: its own line
        raise
    except Exception as error:  # a broken outside module is the user's to fix: one line
        absent = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
        if absent in sgl_kernel_stand_in.SERVED and sgl_kernel_stand_in.install():
            return load_attribute(path)  # an earlier SGLang's host kernels: the stand-in, once
        text = f"import path {path!r}: cannot import {module_name!r}: {safe_text(error)}"
        if absent and f"{module_name}.".startswith(f"{absent}."):  # it, or a package above it
            raise NotThere(text, f"module {module_name}") from None
        if absent and "." in absent and module_exists(absent.partition(".")[0]):
            raise NotThere(text, f"module {absent}") from None  # a module its package lacks
        if absent and "." not in absent:  # a package of its own, not installed (e.g. the
            needs = ImplementationError(text)  # compiled sgl_kernel of an earlier SGLang)
            needs.needs = (module_name, absent)
            raise needs from None
        raise ImplementationError(text) from None
    for part in attr_path.split("."):
        try:
            found = hasattr(obj, part)
        except Exception as error:  # an attribute built on use (a mutant of upstream code)
            raise ImplementationError(f"import path {path!r}: {safe_text(error)}") from None
        if not found:
            raise NotThere(f"import path {path!r}: {module_name!r} has no attribute "
                           f"{attr_path!r}", f"{attr_path} in {module_name}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ImplementationError(f"import path {path!r}: {attr_path!r} is not callable")
    return obj
