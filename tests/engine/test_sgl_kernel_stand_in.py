"""The stand-in for SGLang's compiled `sgl_kernel` (impl/sgl_kernel_stand_in.py), without SGLang:
put on the import path only when an implementation's module fails to import for want of it (and
none is installed), it serves the host-transfer kernels an earlier release imports at module
level (`sgl_kernel.kvcacheio.transfer_kv_*`), each raising when called, and nothing else; the
import is tried once more with it. Each beside a broken variant it catches."""

from __future__ import annotations

import sys

import pytest

from kvfuzz.impl import sgl_kernel_stand_in as stand_in
from kvfuzz.impl.registry import ImplementationError, load_attribute

# (a release's host pool: the kernels imported at module level, a class beside them)
RELEASE_MODULE = """
from sgl_kernel.kvcacheio import transfer_kv_per_layer, transfer_kv_direct

class HostPool:
    def transfer(self):
        return transfer_kv_per_layer()
"""


@pytest.fixture
def clean_imports(monkeypatch, tmp_path):
    """No stand-in, no `sgl_kernel` and no test module imported before or left after."""
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path
                                           if not isinstance(f, stand_in._Finder)])
    names = ("sgl_kernel", "sgl_kernel.kvcacheio", "kvfuzz_old_release_pool")
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    (tmp_path / "kvfuzz_old_release_pool.py").write_text(RELEASE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in names:
        sys.modules.pop(name, None)


def test_an_import_that_needs_sgl_kernel_is_retried_with_the_stand_in(clean_imports):
    pool = load_attribute("kvfuzz_old_release_pool:HostPool")
    assert pool.__name__ == "HostPool" and stand_in.in_use()
    with pytest.raises(stand_in.StandInCalled, match=r"transfer_kv_per_layer is kvfuzz's "
                                                     r"stand-in"):
        pool().transfer()  # a call that reaches a kernel crashes, naming it
    # only the host-transfer kernels: every other name is absent as before
    with pytest.raises(ImportError):
        exec("from sgl_kernel.kvcacheio import alloc_extend_kernel", {})
    with pytest.raises(ImportError):
        exec("from sgl_kernel import fused_add_rmsnorm", {})
    assert not stand_in.install()  # there already: an import failing with it fails for good


def test_without_the_stand_in_the_release_is_one_line(clean_imports, monkeypatch):
    monkeypatch.setattr(stand_in, "install", lambda: False)  # broken: never put there
    with pytest.raises(ImplementationError, match=r"No module named 'sgl_kernel'") as raised:
        load_attribute("kvfuzz_old_release_pool:HostPool")
    assert raised.value.needs == ("kvfuzz_old_release_pool", "sgl_kernel")


def test_an_installed_sgl_kernel_wins(clean_imports):
    package = clean_imports / "sgl_kernel"
    package.mkdir()
    (package / "__init__.py").write_text("REAL = True\n")
    (package / "kvcacheio.py").write_text("def transfer_kv_per_layer(): return 'real'\n"
                                          "def transfer_kv_direct(): return 'real'\n")
    assert not stand_in.install()
    pool = load_attribute("kvfuzz_old_release_pool:HostPool")
    assert pool().transfer() == "real" and not stand_in.in_use()
