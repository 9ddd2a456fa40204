"""A stand-in for SGLang's compiled kernel package `sgl_kernel` where it is not installed (kvfuzz
installs no engine's compiled packages, and it has no CPU build), holding one family of names:
the host-transfer kernels of `sgl_kernel.kvcacheio` (`transfer_kv_*`), and each raises when
called, naming itself.

Why that is honest (docs/release-history.md, "A stand-in for sgl_kernel"): SGLang 0.5.10's
`radix_cache` and 0.5.11's `unified_radix_cache` import HiCache's host memory pool
(`memory_pool_host`, through `hicache_storage`) for a hash function and a type, and that module
imports these kernels at module level. They copy KV between the device pool and a host pool,
which only HiCache configures; no trace kvfuzz runs builds a host pool, so the code under test
is the release's own, line for line, and a call that did reach a kernel would crash the trace
with this module's message instead of running anything else. Every other name of the package
is absent as before (`from sgl_kernel import x` still fails), the package registers no torch
ops (SGLang's `hasattr(torch.ops.sgl_kernel, ...)` probes stay false), a real `sgl_kernel`
wins (the finder comes last and serves only what nothing else finds), and it is put there only
when an implementation's module fails to import for want of it. Standard library only."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

PACKAGE, KVCACHEIO = "sgl_kernel", "sgl_kernel.kvcacheio"
SERVED = (PACKAGE, KVCACHEIO)  # what an import that fails for want of them is retried with
FAMILY = "transfer_kv"  # the host-transfer kernels: the only names served


class StandInCalled(RuntimeError):
    """A kernel of the stand-in was called: the trace reached HiCache's host transfers."""


def _kernel(name: str):
    def kernel(*args, **kwargs):
        raise StandInCalled(f"{KVCACHEIO}.{name} is kvfuzz's stand-in (SGLang's compiled "
                            f"sgl_kernel is not installed): a host-transfer kernel was called")
    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def _kvcacheio_attribute(name: str):
    if name.startswith(FAMILY):
        return _kernel(name)
    raise AttributeError(f"module {KVCACHEIO!r} (kvfuzz's stand-in) has no attribute {name!r}")


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None  # the default module

    def exec_module(self, module) -> None:
        module.__doc__ = f"kvfuzz's stand-in for {module.__name__}: {__name__}"
        if module.__name__ == KVCACHEIO:
            module.__getattr__ = _kvcacheio_attribute


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in (PACKAGE, KVCACHEIO):
            return None
        spec = importlib.machinery.ModuleSpec(fullname, _Loader(),
                                              is_package=fullname == PACKAGE)
        if fullname == PACKAGE:
            spec.submodule_search_locations = []
        return spec


def install() -> bool:
    """Put the stand-in last on `sys.meta_path`, where no `sgl_kernel` is installed and it is not
    there yet: whether it was put there now (the import that failed for want of it is then
    tried once more: `registry.load_attribute`). Only then: a release whose modules import
    without it (0.5.23's) imports exactly as before."""
    if any(isinstance(finder, _Finder) for finder in sys.meta_path):
        return False
    if PACKAGE in sys.modules or importlib.util.find_spec(PACKAGE) is not None:
        return False  # the real package
    sys.meta_path.append(_Finder())
    return True


def in_use() -> bool:
    module = sys.modules.get(PACKAGE)
    return module is not None and isinstance(getattr(module, "__spec__", None) and
                                             module.__spec__.loader, _Loader)
