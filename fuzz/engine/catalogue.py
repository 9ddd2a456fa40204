"""A target's catalogue part: its implementations (`kvfuzz.impl.<target>.IMPLEMENTATIONS`), the
shape an outside one must have, and what runs by default."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from kvfuzz.fuzz.engine.apart import LOAD_GRACE, Failed, run_apart, sandbox
from kvfuzz.impl.registry import (UPSTREAM, Implementation, ImplementationError,
                                  installed_release, loaded_here, resolve)
from kvfuzz.impl.upstream_cache import pinned

# Where the install of each package an implementation `requires` is explained.
INSTALL_DOCS = {"sglang": "docs/upstream-sglang.md", "vllm": "docs/upstream-vllm.md"}
# A released engine's entry as the installed release has it, or why that release cannot be
# driven (`Catalogue.as_installed`), once per process.
_INSTALLED: dict[Implementation, Implementation | ImplementationError] = {}


@dataclass(frozen=True)
class Catalogue:
    target: str
    implementations: tuple[Implementation, ...]
    # shape(path, obj) raises `ImplementationError` (one line) unless `obj` has the shape the
    # target calls (`kvfuzz.impl.registry.check_shape`).
    shape: Callable[[str, object], None]
    # declare(impl, obj): what an outside implementation declares by its shape (e.g. the token
    # interface of an allocator class), read after its catalogue entry's.
    declare: Callable[[Implementation, object], Implementation] | None = None
    fuzz_defaults: tuple[str, ...] | None = None  # `kvfuzz fuzz` without --impl
    # What an outside implementation may declare it supports, by name: {name: precondition}.
    declarable: dict | None = field(default=None, hash=False, compare=False)

    def resolve(self, spec: str) -> Implementation:
        """A registered implementation, or an outside one whose shape the target accepts, with
        what it declares. An outside one is imported and checked in a process of its own
        (`apart.py`): its module's import-time code never runs in the supervisor.
        `package.module:attr@name+name` adds declarations by name (`declarable`)."""
        path, _, names = spec.partition("@")
        declared = self.preconditions_named(spec, names.split("+")) if names else ()
        impl = resolve(self.target, self.implementations, path)
        if impl in self.implementations and not declared:
            return self.as_installed(impl)
        if impl in self.implementations:
            raise ImplementationError(f"--impl {spec}: declarations (@...) go with an import "
                                      f"path, not a registered name")
        impl = self._apart(self.examined, impl)
        return replace(impl, name=spec, preconditions=_union(impl.preconditions, declared))

    def as_installed(self, impl: Implementation) -> Implementation:
        """A released engine's class as the installed release has it. At the release kvfuzz
        pins (`impl/upstream.lock`) its entry holds as written; at another one the class is
        loaded apart and read (`declare`: what its API lacks becomes preconditions, so it gets
        the inputs it can take), or `ImplementationError` says in one line why that release
        cannot be driven ("not supported: sglang 0.5.12 has no ...")."""
        release = installed_release(impl.requires) if impl.kind == UPSTREAM else None
        if release is None or release == pinned(impl.requires):
            return impl
        found = _INSTALLED.get(impl)
        if found is None:
            try:
                found = self._apart(self.read, impl)
            except ImplementationError as error:
                found = error
            _INSTALLED[impl] = found
        if isinstance(found, ImplementationError):
            raise found
        return found

    def read(self, impl: Implementation) -> Implementation:
        """A released class, loaded, with what its API says (`declare`)."""
        obj = impl.load()
        return self.declare(impl, obj) if self.declare else impl

    def _apart(self, examine, impl: Implementation) -> Implementation:
        """`examine(impl)` in a process of its own (`apart.py`): a module's import-time code
        never runs in the supervisor."""
        if sandbox() or loaded_here(impl.path):
            return examine(impl)
        try:
            return run_apart(examine, impl, LOAD_GRACE)
        except Failed as failed:
            verb = "raised" if failed.raised else "ended the process that imports it:"
            raise ImplementationError(
                f"import path {impl.path!r}: {verb} {failed.what}, before any input (its "
                f"module, or its attribute)") from None

    def preconditions_named(self, where: str, names) -> tuple[str, ...]:
        """The preconditions `names` stand for; a one-line error for a name this target does
        not know."""
        known = self.declarable or {}
        unknown = [name for name in names if name not in known]
        if unknown:
            choices = ", ".join(known) or "none: every input is in its contract"
            raise ImplementationError(f"{where}: {self.target} has no precondition "
                                      f"{unknown[0]!r} (known: {choices})")
        return tuple(known[name] for name in names)

    def examined(self, impl: Implementation) -> Implementation:
        """`impl` loaded, its shape checked, with what it declares."""
        obj = impl.load()
        self.shape(impl.path, obj)
        return self.declared(impl, obj)

    def declared(self, impl: Implementation, obj) -> Implementation:
        """An outside implementation with what it declares: a class or function of the catalogue
        (an upstream one) handed over as an object, or re-exported under another import path,
        keeps its entry's preconditions (matched by where it is defined), so that it gets the
        inputs its own import path gets; then what its shape says (`declare`), and what it
        declares itself: `__kvfuzz__ = {"preconditions": [name, ...]}` (`declarable`)."""
        defined = f"{_attribute(obj, '__module__')}:{_attribute(obj, '__qualname__')}"
        for entry in self.implementations:
            if {impl.name, impl.path, defined} & set(entry.paths):
                impl = replace(impl, preconditions=entry.preconditions,
                               safe_outside_contract=entry.safe_outside_contract)
                break
        impl = self.declare(impl, obj) if self.declare else impl
        own = _attribute(obj, "__kvfuzz__", None)
        if own is None:
            return impl
        names = own.get("preconditions") if type(own) is dict and set(own) <= {
            "preconditions"} else None
        if not (isinstance(names, (list, tuple)) and all(type(n) is str for n in names)):
            raise ImplementationError(f"import path {impl.path!r}: __kvfuzz__ is {own!r:.80}; "
                                      f"expected {{'preconditions': [name, ...]}}")
        declared = self.preconditions_named(f"import path {impl.path!r}: __kvfuzz__", names)
        return replace(impl, preconditions=_union(impl.preconditions, declared))

    def defaults(self, upstream: bool = False) -> list[Implementation]:
        """What runs without --impl: kvfuzz's own, and upstream classes marked default (with
        `upstream`: every upstream one), whose packages are installed, as the installed release
        has them; one that release cannot drive is left out (`unsupported` says why)."""
        chosen = []
        for impl in self.implementations:
            if impl.available() and (impl.runs_by_default or upstream and impl.kind == UPSTREAM):
                try:
                    chosen.append(self.as_installed(impl))
                except ImplementationError:
                    pass
        return chosen

    def unsupported(self) -> list[tuple[str, str]]:
        """(name, why) of each entry `defaults` left out: the installed release cannot drive it."""
        return [(impl.name, str(found)) for impl, found in _INSTALLED.items()
                if impl.target == self.target and isinstance(found, ImplementationError)]

    def not_run_reason(self) -> str | None:
        """Why nothing runs by default (every default implementation needs a package that is not
        installed), or None."""
        wanted = [impl for impl in self.implementations if impl.runs_by_default]
        if not wanted or any(impl.available() for impl in wanted):
            return None
        needs = sorted({impl.requires for impl in wanted})
        docs = ", ".join(INSTALL_DOCS.get(name, name) for name in needs)
        return (f"its implementations need {' and '.join(needs)}, which "
                f"{'is' if len(needs) == 1 else 'are'} not installed (kvfuzz upstream fetch "
                f"puts the pinned release in kvfuzz's cache; {docs})")

    def defaults_or_error(self) -> list[Implementation]:
        """`defaults()`, or, when nothing would run (its packages are missing), the one-line
        usage error that says why: for a command or call that names this target alone."""
        impls = self.defaults()
        if not impls:
            raise ImplementationError(f"target {self.target}: not run: "
                                      f"{self.not_run_reason() or 'no implementation'}")
        return impls

    def fuzzed_by_default(self) -> list[str]:
        return list(self.fuzz_defaults or [impl.name for impl in self.defaults()])


def _union(first: tuple, more: tuple) -> tuple:
    return tuple(dict.fromkeys((*first, *more)))


def _attribute(obj, name: str, default=""):
    """An attribute of someone else's object, whose `__getattr__` may raise anything."""
    try:
        return getattr(obj, name, default)
    except Exception:  # noqa: BLE001 - a hostile attribute reads as absent
        return default
