"""Broken variants of SGLang 0.5.11's `UnifiedRadixCache`, whose tree is nodes of its own (no tree
core: `node_tree.py`): the installed module's source with ONE edit inside one method each
(`impl/source_mutation.py`), built on first use. Not catalogue entries (the catalogue's unified
mutants edit 0.5.23's core and components, which 0.5.11 does not have): a test runs one as an
outside class on 0.5.11, declared as the Python entry is, e.g.

    PYTHONPATH=~/.cache/kvfuzz/history/sglang-0.5.11 kvfuzz diff unified \\
        --impl 'kvfuzz.impl.unified.own_nodes_mutants:split_child_stale_key@python_core+keeps_key'
They need sglang 0.5.11 installed."""

from __future__ import annotations

from kvfuzz.impl.registry import load_attribute
from kvfuzz.impl.source_mutation import Mutation, mutant_classes

MODULE, CLASS = "sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache"

MUTATIONS = {
    "split_child_stale_key": Mutation(
        f"{CLASS}._split_node", "{key[split_len:].child_key(self.page_size): child}",
        "{key.child_key(self.page_size): child}",
        "a split files the lower child under its old first page (the bug the 0.5.23 catalogue's "
        "mutant of the same name puts in the tree core, #36696)"),
    "insert_walk_keeps_lru_place": Mutation(
        f"{CLASS}._touch_node",
        "self._for_each_component_lru(node, UnifiedLRUList.reset_node_mru)", "pass",
        "an insert's walk stamps its nodes' times but leaves their place in the LRU lists: the "
        "eviction order forgets that the insert used them"),
}

_build = mutant_classes(MODULE, CLASS, MUTATIONS, "sglang_unified_own_nodes")


def __getattr__(name: str):
    if name in MUTATIONS:  # the released module first: 0.5.11's imports need the sgl_kernel
        load_attribute(f"{MODULE}:{CLASS}")  # stand-in, which the registry's loader puts there
    return _build(name)
