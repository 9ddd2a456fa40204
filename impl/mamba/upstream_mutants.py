"""Broken variants of the released upstream `MambaSlotAllocator` (sglang 0.5.23): the installed
module's source with ONE edit inside one method each (`impl/source_mutation.py`), built on first
use. They need sglang installed; the tests that run them skip without it."""

from __future__ import annotations

from kvfuzz.impl.source_mutation import Mutation, mutant_classes

MODULE, CLASS = "sglang.srt.mem_cache.allocator.mamba", "MambaSlotAllocator"

MUTATIONS = {
    "free_prepends": Mutation(
        f"{CLASS}.free", "torch.cat((self.free_slots, free_index))",
        "torch.cat((free_index, self.free_slots))",
        "freed slots go to the head of the free list, not the tail"),
    "group_end_drops_unused": Mutation(
        f"{CLASS}.alloc_group_end", "self.free(torch.cat(remaining))", "pass",
        "alloc_group_end forgets the unused pre-allocated slots"),
    "reserved_slot_handed_out": Mutation(
        f"{CLASS}.clear", "1, self.size + 1", "0, self.size",
        "clear() puts the reserved slot 0 on the free list"),
    "group_serves_any_size": Mutation(
        f"{CLASS}.alloc", "and need_size == 1", "",
        "inside a group, alloc(n) returns one pre-allocated slot whatever n is"),
    "exact_fit_refused": Mutation(
        f"{CLASS}._do_alloc", "if need_size > len(self.free_slots):",
        "if need_size >= len(self.free_slots):",
        "an allocation of exactly the free slots is refused"),
    "schedulable_counts_nothing": Mutation(
        f"{CLASS}.schedulable_available_size", "return self.available_size()", "return 0",
        "the planner's free count is always 0: the scheduler admits no request"),
}


__getattr__ = mutant_classes(MODULE, CLASS, MUTATIONS, "sglang_mamba")
