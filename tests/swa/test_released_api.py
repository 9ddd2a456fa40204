"""SGLang's SWA class of an earlier release, whose paged pools launch the Triton kernels:
read from its source, it gets power-of-two pages only (moved from
tests/engine/test_released_api.py). A module written here stands for the release."""

from __future__ import annotations

import sys

import pytest

from kvfuzz.fuzz.targets import TARGETS


def _module_of(name: str, source: str):
    """A module `name` made of `source`, registered in sys.modules (the declare step reads a
    class's module there)."""
    import types
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    sys.modules[name] = module
    return module


SWA_RELEASE = '''
def alloc_extend_kernel(*args): pass
def alloc_extend_naive(*args): pass


class PagedTokenToKVPoolAllocator:
    def alloc_extend(self, *args):
        {body}

    def alloc_decode(self, *args):
        pass


class SWATokenToKVPoolAllocator:
    def free(self): pass
    def free_full(self): pass
    def free_swa(self): pass
    def alloc_extend_swa_tail(self): pass
    def free_swa_segment(self): pass
    def free_full_segment(self): pass
    def free_segment(self): pass
    def evict_to_free_tokens(self): pass
    def reclaim_for_prealloc(self): pass
    def resize(self): pass
    def get_cpu_copy(self): pass
    def load_cpu_copy(self): pass
'''


@pytest.mark.parametrize("body, pow2", [
    ("alloc_extend_kernel(*args)", True),  # SGLang before 0.5.22: the kernel, always
    ("(alloc_extend_kernel if args else alloc_extend_naive)(*args)", False),  # 0.5.22 on
])
def test_an_swa_class_whose_paged_pools_launch_the_kernels_gets_power_of_two_pages(
        body, pow2, monkeypatch):
    from kvfuzz.strategies.swa.profile import POW2_PAGES

    monkeypatch.delitem(sys.modules, "fakeswa", raising=False)
    module = _module_of("fakeswa", SWA_RELEASE.format(body=body))
    target = TARGETS["swa"]
    entry = target.catalogue.resolve("sglang.swa")
    declared = target.catalogue.declare(entry, module.SWATokenToKVPoolAllocator)
    assert (POW2_PAGES in declared.preconditions) is pow2
    traces = [target.generator.generate(0, index, [declared]) for index in range(60)]
    sizes = {trace.page_size for trace in traces}
    assert (3 in sizes) is not pow2  # the usual stream has page size 3 in 60 traces
    if pow2:
        assert traces[0].origin.generator.endswith(",pow2]")
        usual = next(trace for trace in (target.generator.generate(0, index, [entry])
                                         for index in range(60)) if trace.page_size == 3)
        assert target.judge.broken(usual, declared.preconditions) == [POW2_PAGES]
