"""Broken variants of the released upstream classes (sglang 0.5.23): each is the installed
module's source with ONE edit inside one method (`impl/source_mutation.py`), built on first use.
They need sglang installed; the tests that run them skip without it. Each fault breaks a
contract a scheduler relies on (the released source is the contract), none is a known bug.
"""

from __future__ import annotations

from kvfuzz.impl.source_mutation import Mutation, mutant_module

TOKEN, PAGED = "sglang.srt.mem_cache.allocator.token", "sglang.srt.mem_cache.allocator.paged"
TOKEN_CLASS, PAGED_CLASS = "TokenToKVPoolAllocator", "PagedTokenToKVPoolAllocator"

# name -> (module, class, the edit)
MUTATIONS = {
    "token_free_prepends": (TOKEN, TOKEN_CLASS, Mutation(
        f"{TOKEN_CLASS}.free", "torch.cat((self.free_pages, free_index))",
        "torch.cat((free_index, self.free_pages))",
        "freed slots go to the head of the free list, not the tail")),
    "token_group_keeps_view": (TOKEN, TOKEN_CLASS, Mutation(
        f"{TOKEN_CLASS}.free", "self.free_group.append(self._copy_for_free_group(free_index))",
        "self.free_group.append(free_index)",
        "a free group keeps the caller's tensor, not a copy")),
    "token_alloc_never_merges": (TOKEN, TOKEN_CLASS, Mutation(
        f"{TOKEN_CLASS}.alloc", "self.merge_and_sort_free()", "pass",
        "need_sort: alloc never merges the staged slots back")),
    "token_offload_never_loads": (TOKEN, TOKEN_CLASS, Mutation(
        f"{TOKEN_CLASS}.load_cpu_copy", "return self._kvcache.load_cpu_copy(",
        "return (lambda *args, **kwargs: None)(",
        "load_cpu_copy never reaches the KV cache: a retracted request resumes on stale KV")),
    "paged_group_keeps_view": (PAGED, PAGED_CLASS, Mutation(
        f"{PAGED_CLASS}.free", "self.free_group.append(self._copy_for_free_group(free_index))",
        "self.free_group.append(free_index)",
        "a free group keeps the caller's tensor, not a copy")),
    "paged_merge_drops_staged": (PAGED, PAGED_CLASS, Mutation(
        f"{PAGED_CLASS}.merge_and_sort_free", "torch.sort(self.get_all_free_pages())",
        "torch.sort(self.free_pages)", "the merge sorts the free list alone: staged pages lost")),
    "paged_extend_skips_exact_check": (PAGED, PAGED_CLASS, Mutation(
        f"{PAGED_CLASS}.alloc_extend", "return None", "pass",
        "alloc_extend goes on when the exact page count does not fit")),
    "paged_clear_keeps_group": (PAGED, PAGED_CLASS, Mutation(
        f"{PAGED_CLASS}.clear", "self.free_group = None", "pass",
        "clear() inside a free group leaves the group open")),
}


def __getattr__(name: str):
    """The mutant class `name` (a key of MUTATIONS), built from the installed source."""
    if name not in MUTATIONS:
        raise AttributeError(name)
    module, cls, mutation = MUTATIONS[name]
    return getattr(mutant_module(module, mutation, f"sglang_{name}"), cls)
