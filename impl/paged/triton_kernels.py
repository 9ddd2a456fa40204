"""Paged `alloc_extend` / `alloc_decode` as Triton kernels (spec §5), behind launch wrappers with
the torch functions' signature. Without CUDA they run through Triton's interpreter
(`impl.triton_env`: TRITON_INTERPRET=1 is set before the first `@triton.jit` here).

One program per request. Each program sums the earlier requests itself (exclusive prefix sums,
masked loads with `other=0`, in fixed steps of BATCH_STEP lanes) and then writes its three
phases; the whole-page phase is a loop bounded at run time. Only the page size is a constexpr
that varies, so one compilation per page size serves every batch size and extend length.

Preconditions beyond the torch functions: the page size is a power of two (`tl.arange`).
Unlike upstream, every load and store is also masked by its tensor's length (passed from shapes,
never read from data): a pool shorter than the demand, or an output of the wrong length, gives
wrong slots (page 0 stands in for a missing page) but never an out-of-bounds access.
"""

from __future__ import annotations

from kvfuzz.impl.triton_env import use_interpreter_without_cuda

use_interpreter_without_cuda()

import triton  # noqa: E402  (after the interpreter choice above)
import triton.language as tl  # noqa: E402

BATCH_STEP = 512  # lanes per prefix-sum step: one step covers every batch below 513 requests
BLOCK = 1024      # lanes per iteration of the whole-page loop

# tl.sum's own combine function: tl.reduce with it is tl.sum without the two @jit calls that wrap
# it, and the interpreter maps it straight to numpy.sum.
_add = tl.standard._sum_combine


@triton.jit(do_not_specialize=["free_ptr", "num_free", "num_out"])
def extend_kernel(prefix_ptr, seq_ptr, last_loc_ptr, free_ptr, out_ptr, num_free, num_out,
                  page_size: tl.constexpr, BATCH_STEP: tl.constexpr, BLOCK: tl.constexpr):
    # One function calling no @triton.jit helper (not even tl.sum or tl.zeros): the interpreter
    # re-patches triton.language on every such call, at milliseconds each, which once made up
    # half of its cost per case.
    pid = tl.program_id(0)
    # Exclusive prefix sums over requests 0..pid-1: where this request's output and pool slice
    # start. Accumulated lane-wise in int64, reduced once.
    tokens_before = tl.full([BATCH_STEP], 0, tl.int64)
    pages_before = tl.full([BATCH_STEP], 0, tl.int64)
    for step in range(0, (pid + BATCH_STEP - 1) // BATCH_STEP):
        lane = step * BATCH_STEP + tl.arange(0, BATCH_STEP)
        earlier = lane < pid
        prefix_k = tl.load(prefix_ptr + lane, mask=earlier, other=0)
        seq_k = tl.load(seq_ptr + lane, mask=earlier, other=0)
        tokens_before += seq_k - prefix_k
        pages_before += ((seq_k + page_size - 1) // page_size
                         - (prefix_k + page_size - 1) // page_size)
    out_start = tl.reduce(tokens_before, 0, _add)
    page_start = tl.reduce(pages_before, 0, _add)

    prefix = tl.load(prefix_ptr + pid)
    seq = tl.load(seq_ptr + pid)
    ceil_prefix = (prefix + page_size - 1) // page_size * page_size
    floor_seq = seq // page_size * page_size
    num1 = tl.minimum(seq, ceil_prefix) - prefix
    needs_pages = seq > ceil_prefix
    num2 = tl.where(needs_pages, floor_seq - ceil_prefix, 0)
    num3 = tl.where(needs_pages, seq - floor_seq, 0)
    in_page = tl.arange(0, page_size)

    # Phase 1: continue the page that holds last_loc. (Triton carries a name assigned both
    # before and inside a loop through the loop, so each phase has its own names.)
    last_loc = tl.load(last_loc_ptr + pid)
    pos1 = out_start + in_page
    tl.store(out_ptr + pos1, last_loc + 1 + in_page,
             mask=(in_page < num1) & (pos1 >= 0) & (pos1 < num_out))

    # Phase 2: whole pages from the head of the slice, BLOCK slots per iteration.
    for block in range(0, (num2 + BLOCK - 1) // BLOCK):
        offset = block * BLOCK + tl.arange(0, BLOCK)
        index2 = page_start + offset // page_size
        page2 = tl.load(free_ptr + index2,
                        mask=(offset < num2) & (index2 >= 0) & (index2 < num_free), other=0)
        pos2 = out_start + num1 + offset
        tl.store(out_ptr + pos2, page2 * page_size + offset % page_size,
                 mask=(offset < num2) & (pos2 >= 0) & (pos2 < num_out))

    # Phase 3: the start of the last page of the slice (not read when num3 is 0).
    index3 = page_start + num2 // page_size
    page3 = tl.load(free_ptr + index3, mask=(num3 > 0) & (index3 >= 0) & (index3 < num_free),
                    other=0)
    pos3 = out_start + num1 + num2 + in_page
    tl.store(out_ptr + pos3, page3 * page_size + in_page,
             mask=(in_page < num3) & (pos3 >= 0) & (pos3 < num_out))


@triton.jit(do_not_specialize=["free_ptr", "num_free", "num_out"])
def decode_kernel(seq_ptr, last_loc_ptr, free_ptr, out_ptr, num_free, num_out,
                  page_size: tl.constexpr, BATCH_STEP: tl.constexpr):
    pid = tl.program_id(0)
    # Exclusive count of earlier requests whose new token opens a page: this one's pool index.
    openers = tl.full([BATCH_STEP], 0, tl.int64)
    for step in range(0, (pid + BATCH_STEP - 1) // BATCH_STEP):
        lane = step * BATCH_STEP + tl.arange(0, BATCH_STEP)
        before = lane < pid
        seq_k = tl.load(seq_ptr + lane, mask=before, other=0)
        # `before &`: a masked lane reads 0, and (0 - 1) % 1 == 0 would count it when P == 1.
        openers += (before & ((seq_k - 1) % page_size == 0)).to(tl.int64)
    rank = tl.reduce(openers, 0, _add)

    seq = tl.load(seq_ptr + pid)
    opens_page = (seq - 1) % page_size == 0
    page = tl.load(free_ptr + rank, mask=opens_page & (rank < num_free), other=0)
    last_loc = tl.load(last_loc_ptr + pid)
    tl.store(out_ptr + pid, tl.where(opens_page, page * page_size, last_loc + 1),
             mask=pid < num_out)


def check_launch(page_size: int, **tensors) -> None:
    """Host-side checks on plain ints and shapes only: they never read a tensor's data."""
    if page_size < 1 or page_size & (page_size - 1):
        raise ValueError(f"page_size {page_size}: the Triton kernels need a power of two")
    for name, tensor in tensors.items():
        if tensor.dim() != 1 or not tensor.is_contiguous():
            raise ValueError(f"{name}: expected a contiguous 1-D tensor, got shape "
                             f"{tuple(tensor.shape)}, stride {tuple(tensor.stride())}")


def alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    """Write the slots of a batched extend into `out_indices` (`device` is unused: the tensors
    carry theirs). No host sync: an empty output or batch is found from shapes."""
    check_launch(page_size, prefix_lens=prefix_lens, seq_lens=seq_lens, last_loc=last_loc,
                 free_pages=free_pages, out_indices=out_indices)
    if out_indices.shape[0] == 0 or seq_lens.shape[0] == 0:
        return
    extend_kernel[(seq_lens.shape[0],)](
        prefix_lens, seq_lens, last_loc, free_pages, out_indices, free_pages.shape[0],
        out_indices.shape[0], page_size, BATCH_STEP, BLOCK)


def alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size, num_new_pages):
    """One token per request. `num_new_pages` is accepted for the upstream signature and never
    read: the pool's length (a shape) bounds every load."""
    check_launch(page_size, seq_lens=seq_lens, last_loc=last_loc, free_pages=free_pages,
                 out_indices=out_indices)
    if out_indices.shape[0] == 0 or seq_lens.shape[0] == 0:
        return
    decode_kernel[(seq_lens.shape[0],)](
        seq_lens, last_loc, free_pages, out_indices, free_pages.shape[0], out_indices.shape[0],
        page_size, BATCH_STEP)
