"""Paged `alloc_extend` / `alloc_decode` (targets "extend" and "decode"): the catalogue of bundled
implementations, Triton kernels, upstream adapters and mutants. Nothing heavy is imported here."""

from kvfuzz.impl.registry import KERNEL, MUTANT, UPSTREAM, Implementation, entry

POW2 = ("power-of-two page size",)
# What an outside function may declare, by name (`__kvfuzz__`, or `--impl path@name+name`).
DECLARABLE = {"power_of_two_page_size": POW2[0]}
NAIVE = "sglang.srt.mem_cache.allocator.paged"
ONE_MODULE = "sglang.srt.mem_cache.allocator"  # where SGLang kept its allocators before 0.5.13


def _entry(target, *row, **options):
    return entry(target, __name__, *row, **options)


IMPLEMENTATIONS = (
    _entry("extend", "torch.vectorized", "vectorized:alloc_extend",
           "vectorized torch, one gather per slot, no host sync"),
    _entry("extend", "torch.three_phase", "three_phase:alloc_extend",
           "upstream formulation of PR #37938 (searchsorted, three phases)"),
    _entry("extend", "torch.loop", "loop:alloc_extend",
           "per-request loop, as upstream before PR #37938"),
    _entry("decode", "torch.vectorized", "vectorized:alloc_decode",
           "vectorized torch, exclusive rank of page-opening requests"),
    _entry("decode", "torch.three_phase", "three_phase:alloc_decode",
           "upstream alloc_decode_naive formulation (trusts num_new_pages)"),
    _entry("decode", "torch.loop", "loop:alloc_decode", "per-request loop"),
    _entry("extend", "mutant.no_empty_pool_guard", "mutants:extend_without_empty_pool_guard",
           "gathers from an empty pool (PR #37938 bug 1)", MUTANT),
    _entry("extend", "mutant.no_clamp", "mutants:extend_without_clamp",
           "dead-branch indices unclamped (PR #37938 bug 2)", MUTANT),
    _entry("extend", "mutant.owner_left_bisect", "mutants:extend_owner_left_bisect",
           "owner lookup wrong for zero-length requests", MUTANT),
    _entry("extend", "mutant.inclusive_page_start", "mutants:extend_inclusive_page_start",
           "pool slice starts at the inclusive prefix sum", MUTANT),
    _entry("decode", "mutant.inclusive_rank", "mutants:decode_inclusive_rank",
           "page rank by inclusive cumsum", MUTANT),
    _entry("decode", "mutant.opens_page_off_by_one", "mutants:decode_opens_page_off_by_one",
           "tests seq % P == 0 for a page-opening token", MUTANT),
    # Triton (issue 6). Ours masks every access by its tensor's length, so it is safe to run
    # outside the contract; upstream reads past a short pool (a segfault under the interpreter).
    _entry("extend", "triton", "triton_kernels:alloc_extend",
           "Triton kernel, one program per request (interpreted without CUDA)", KERNEL,
           preconditions=POW2),
    _entry("decode", "triton", "triton_kernels:alloc_decode",
           "Triton kernel, one program per request (interpreted without CUDA)", KERNEL,
           preconditions=POW2),
    # Upstream's kernels are kernels too: run when named (--upstream runs its torch path).
    _entry("extend", "sglang.triton", "upstream_sglang:triton_extend",
           "upstream sglang alloc_extend_kernel (needs sglang)", KERNEL, requires="sglang",
           preconditions=POW2, safe_outside_contract=False),
    _entry("decode", "sglang.triton", "upstream_sglang:triton_decode",
           "upstream sglang alloc_decode_kernel (needs sglang)", KERNEL, requires="sglang",
           preconditions=POW2, safe_outside_contract=False),
    # The released torch path SGLang's allocator takes on CPU (docs/upstream-sglang.md).
    Implementation("sglang.naive", "extend", f"{NAIVE}:alloc_extend_naive",
                   "upstream sglang alloc_extend_naive (needs sglang)", UPSTREAM,
                   requires="sglang", earlier=(f"{ONE_MODULE}:alloc_extend_naive",)),
    Implementation("sglang.naive", "decode", f"{NAIVE}:alloc_decode_naive",
                   "upstream sglang alloc_decode_naive (needs sglang)", UPSTREAM,
                   requires="sglang", earlier=(f"{ONE_MODULE}:alloc_decode_naive",)),
) + tuple(
    # Triton mutants: the kernel source with one edit each (triton_mutants.py).
    _entry(target, f"mutant.triton.{name}", f"triton_mutants:{target}_{name}", summary, MUTANT,
           preconditions=POW2)
    for target, name, summary in (
        ("extend", "inclusive_prefix", "prefix sums include the request itself"),
        ("extend", "garbage_lanes", "masked prefix-sum lanes read 1, not 0"),
        ("extend", "phase2_at_start", "whole-page phase writes over phase 1"),
        ("extend", "last_page_plus_one", "last partial page one past the slice"),
        ("decode", "inclusive_rank", "page rank counts the request itself"),
        ("decode", "counts_masked", "masked lanes counted as page openers (P == 1)"),
    )
)
