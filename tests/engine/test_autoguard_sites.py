"""`kvfuzz guard`'s construction-site patch (fuzz/engine/autoguard/sitecustomize.py): a class the
engine builds by a module global stays a class there, for the engine's own `isinstance` checks
(SGLang asserts its SWA allocator's class right after building it), and what it builds comes
back guarded; a guard's proxy passes as its object's class."""

import importlib.util
import types

import torch

from kvfuzz.fuzz.engine import autoguard
from kvfuzz.fuzz.engine.guard import GuardedObject
from kvfuzz.fuzz.swa.target import SWA
from kvfuzz.impl.swa.kvcache import stand_in_kvcache


def site_module():
    spec = importlib.util.spec_from_file_location(
        "kvfuzz_test_sitecustomize", f"{autoguard.FOLDER}/sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_patched_class_still_answers_isinstance_and_builds_guarded(tmp_path, monkeypatch):
    monkeypatch.setenv("KVFUZZ_GUARD_CORPUS", str(tmp_path))
    cls = SWA.catalogue.resolve("swa.torch").load()
    engine = types.ModuleType("engine_module")
    engine.SWATokenToKVPoolAllocator = cls
    monkeypatch.syspath_prepend(autoguard.FOLDER)  # as `kvfuzz guard` puts it
    site_module()._patch(engine, "SWATokenToKVPoolAllocator", "swa")
    patched = engine.SWATokenToKVPoolAllocator
    assert isinstance(patched, type) and patched.__wrapped__ is cls
    built = patched(64, 32, 4, torch.float16, "cpu", stand_in_kvcache(), False)
    assert type(built).__name__ == "GuardedSWA" and isinstance(built, GuardedObject)
    assert isinstance(built, patched) and isinstance(built, cls)  # the engine's asserts hold
    assert not isinstance(object(), patched) and issubclass(cls, patched)
    assert built.kvfuzz_session.checking
