"""The unified Mamba and donor entries read from what an earlier SGLang release has, without SGLang
(fakes of each release's API; the releases themselves run in `test_donor_releases_release.py`):
`init_unified_mamba_pools` given a switch only where its signature names it (0.5.15-0.5.21 have
no `enable_mamba_extra_buffer_lazy`), the Mamba checkpoint grid read where each release keeps it
(0.5.17's component field, 0.5.16's `get_server_args`), a donor entry one line where the release
has no unified memory pool (before 0.5.15), a Python tree core without the read-only walk
(0.5.17-0.5.19) walked on its nodes, and the donor's order not judged where the release has no
Full donor (before 0.5.20), each beside the broken variant it replaces."""

from __future__ import annotations

import sys
import types
from array import array
from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.unified.target import has_full_donor, no_memory_pool
from kvfuzz.impl.registry import ImplementationError
from kvfuzz.oracle.radix.contract import LEGACY_CALLS, NO_FULL_DONOR, contract_of


def test_a_switch_is_passed_only_where_the_signature_names_it():
    from kvfuzz.impl.unified.mamba import OFF_WHERE_NAMED, _switched_off

    def old(device, enable_mamba_extra_buffer=False):  # 0.5.15-0.5.21
        return device

    def new(device, enable_mamba_extra_buffer=False, enable_mamba_extra_buffer_lazy=False):
        return device

    assert _switched_off(old) == {}
    assert _switched_off(new) == {"enable_mamba_extra_buffer_lazy": False}
    old(device="cpu", **_switched_off(old))
    with pytest.raises(TypeError, match="enable_mamba_extra_buffer_lazy"):  # the call as it was
        old(device="cpu", **OFF_WHERE_NAMED)


def _grid_of(component):
    from kvfuzz.impl.unified.mamba import MambaCalls

    made = MambaCalls()
    made.MAMBA, made.cache = "mamba", SimpleNamespace(components={"mamba": component})
    return made.mamba_grid()


def test_the_grid_is_read_where_each_release_keeps_it(monkeypatch):
    # 0.5.16: the module imports get_server_args (runtime_context), not get_global_server_args
    module = types.ModuleType("fake_0_5_16_mamba_component")
    module.get_server_args = lambda: SimpleNamespace(mamba_cache_chunk_size=64)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert _grid_of(type("MambaComponent", (), {"__module__": module.__name__})()) == 64
    # 0.5.17: the component keeps the chunk size it read at construction
    assert _grid_of(type("MambaComponent", (), {"mamba_cache_chunk_size": 16})()) == 16
    # 0.5.18 on: the checkpoint grid first
    both = type("MambaComponent", (), {"mamba_checkpoint_grid": 48, "mamba_cache_chunk_size": 16})
    assert _grid_of(both()) == 48
    # a module with neither reader: said, not an AttributeError of kvfuzz's
    bare = types.ModuleType("fake_bare_mamba_component")
    monkeypatch.setitem(sys.modules, bare.__name__, bare)
    with pytest.raises(RuntimeError, match="imports neither get_global_server_args nor"):
        _grid_of(type("MambaComponent", (), {"__module__": bare.__name__})())


def test_a_donor_entry_is_one_line_without_the_unified_memory_pool(monkeypatch):
    import kvfuzz.fuzz.radix.target as radix_target
    import kvfuzz.impl.registry as registry

    impl = SimpleNamespace(requires="sglang", path="x:UnifiedRadixCache")
    monkeypatch.setattr(radix_target, "installed_release", lambda package: "0.5.14")
    monkeypatch.setattr(registry, "module_exists", lambda name: False)
    with pytest.raises(ImplementationError) as said:
        no_memory_pool(impl)
    assert str(said.value).startswith("not supported: sglang 0.5.14 has no module "
                                      "sglang.srt.mem_cache.unified_memory_pool")
    assert "\n" not in str(said.value)
    monkeypatch.setattr(registry, "module_exists", lambda name: True)
    no_memory_pool(impl)  # 0.5.15 on: it runs


def test_the_full_donor_is_read_from_the_class_module(monkeypatch):
    import inspect

    module = types.ModuleType("fake_unified_radix_cache")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    cls = type("UnifiedRadixCache", (), {"__module__": module.__name__})
    before = "def evict(self, params):\n    self._evict_components(params)\n"  # 0.5.17
    monkeypatch.setattr(inspect, "getsource", lambda obj: before)
    assert not has_full_donor(cls)
    after = before + "donor = allocator.mamba_full_cache_donor()\n"  # 0.5.20 on
    monkeypatch.setattr(inspect, "getsource", lambda obj: after)
    assert has_full_donor(cls)
    assert not contract_of((LEGACY_CALLS, NO_FULL_DONOR)).full_donor
    assert contract_of((LEGACY_CALLS,)).full_donor and contract_of(()).full_donor


def test_without_a_full_donor_a_state_taken_from_a_node_that_stays_is_the_release_s_way():
    """0.5.15-0.5.19: `evict(mamba_num=1)` takes Mamba states alone. The donor's order is not
    judged there (the broken variant, today's contract, reports it); what the call answered
    against what left the tree still is."""
    from kvfuzz.fuzz.unified.donor_state import eviction_problems
    from tests.unified.test_donor_judge import BUFFER, _after

    stays = ([(-1, [1, 2], 0, [1, 2]), (0, [1, 2, 3], 2, [3]), (0, [1, 2, 4], 2, [4])],
             [[1], None, [3]])
    found, snap = _after(*stays, evictable=3, mamba_evictable=2)

    def problems(answer, full_donor):
        return eviction_problems(found, snap, answer + [BUFFER], None, 1, full_donor=full_donor)

    assert problems([2, 1, 0], full_donor=False) == []
    assert "Full is the donor" in problems([2, 1, 0], full_donor=True)[0][1]
    assert "answered 0 tokens and 2 states" in problems([2, 2, 0], full_donor=False)[0][1]


class _Key:
    """A `RadixKey` of page size 1: its tokens, `child_key`, `match`, slicing."""

    def __init__(self, tokens, extra=None):
        self.tokens, self.extra_key = list(tokens), extra

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, part):
        return _Key(self.tokens[part], self.extra_key)

    def child_key(self, page):
        return tuple(self.tokens[:page])

    def match(self, other, page_size=1):
        n = 0
        while n < min(len(self), len(other)) and self.tokens[n] == other.tokens[n]:
            n += 1
        return n


def _node(node_id, tokens, parent):
    node = SimpleNamespace(id=node_id, key=_Key(tokens), parent=parent, children={},
                           component_data={"full": SimpleNamespace(value=list(tokens))})
    if parent is not None:
        parent.children[tuple(tokens[:1])] = node
    return node


def test_a_python_core_without_the_walk_is_walked_on_its_nodes():
    """0.5.17's core: `root_node`, nodes with `parent`/`children`/`key`, no
    `match_full_device_prefix` (0.5.20 added it; `node_tree.walkable`, as unified012's branch
    has it); every other call the core's own, and the path read made with it."""
    from kvfuzz.impl.unified.node_tree import walkable
    from kvfuzz.impl.unified.paths import path_info

    root = _node(0, [], None)
    upper = _node(1, [1, 2], root)
    _node(2, [3, 4, 5], upper)
    lengths = {0: 0, 1: 2, 2: 5}
    core = SimpleNamespace(root_node=root, page_size=1, size=lambda: 5,
                           get_component_device_value=lambda h, c: [9] * (lengths[h] - (
                               0 if h < 2 else 2)),
                           collect_full_device_indices=lambda h, r: [0] * lengths[h])
    reads = walkable(core, "full")
    assert reads is not core and walkable(reads, "full") is reads
    assert reads.match_full_device_prefix(_Key([1, 2, 3, 4, 5, 6])) == (5, 2, 5)
    assert reads.match_full_device_prefix(_Key([1, 2, 3])) == (2, 1, 2)  # whole nodes only
    assert reads.size() == 5
    driver = SimpleNamespace(tree_core=reads, root_handle=lambda: 0, FULL="full",
                             Key=lambda tokens, extra: _Key(tokens, extra))
    assert [tuple(info) for info in path_info(driver, 2, [1, 2, 3, 4, 5], None)] == [
        (1, 0, 0, 2), (2, 1, 2, 5)]
    # the core as it is (the broken variant): the path read fails as it did on 0.5.17
    bare = SimpleNamespace(tree_core=core, root_handle=lambda: 0, FULL="full",
                           Key=lambda tokens, extra: _Key(array("q", tokens), extra))
    with pytest.raises(AttributeError, match="match_full_device_prefix"):
        path_info(bare, 2, [1, 2, 3, 4, 5], None)


def test_a_rust_entry_is_one_line_without_its_cores_path_reads(monkeypatch, tmp_path):
    """0.5.19: an adapter with neither path read, one line; 0.5.20 on:
    `match_full_device_prefix` (then `collect_path_info`), driven. Read from the file."""
    import importlib.util

    import kvfuzz.fuzz.radix.target as radix_target
    import kvfuzz.impl.registry as registry
    from kvfuzz.fuzz.unified.target import no_rust_reads

    impl = SimpleNamespace(requires="sglang", path="x:UnifiedRadixCache")
    monkeypatch.setattr(radix_target, "installed_release", lambda package: "0.5.19")
    monkeypatch.setattr(registry, "module_exists", lambda name: False)
    no_rust_reads(impl)  # 0.5.17, 0.5.18: no adapter (their registry's line says so)
    adapter = tmp_path / "adapter.py"
    monkeypatch.setattr(registry, "module_exists", lambda name: True)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: SimpleNamespace(origin=str(adapter)))
    adapter.write_text("class RustUnifiedTreeCore:\n    def node_by_id(self, node_id): ...\n")
    with pytest.raises(ImplementationError) as said:
        no_rust_reads(impl)
    assert str(said.value).startswith("not supported: sglang 0.5.19: its Rust tree core has no "
                                      "read-only path read")
    adapter.write_text("class RustUnifiedTreeCore:\n    def match_full_device_prefix(self): ...\n")
    no_rust_reads(impl)  # 0.5.20: driven
    no_rust_reads(SimpleNamespace(requires=None, path="mine:Cache"))  # an outside class: as is
