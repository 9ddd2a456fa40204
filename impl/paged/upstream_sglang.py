"""Launch adapters for the upstream SGLang Triton kernels (`sglang.kernels.ops.memory.allocator`)
behind the torch functions' signature, so `--impl impl.upstream_sglang:triton_extend` (and
`:triton_decode`) runs them. sglang is imported on first use of an adapter, never at import.
Without CUDA, TRITON_INTERPRET=1 must be set before anything imports triton: upstream calls
tl.sum, which is interpreted only if triton itself was imported with the variable set.

Without sglang, naming an adapter fails in one line (`ImplementationError`) when the
implementation is resolved, not once per case. Upstream reads past a short pool (garbage, or a
segfault under the interpreter: see docs/triton.md), so its registry entries say it is unsafe
outside the contract.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util

from kvfuzz.impl.registry import ImplementationError, module_exists
from kvfuzz.impl.triton_env import use_interpreter_without_cuda
from kvfuzz.impl.upstream_env import prepare_import

KERNELS = "sglang.kernels.ops.memory.allocator"
# Where earlier releases kept them: 0.5.13 to 0.5.18, then before 0.5.13 beside the allocators.
EARLIER = ("sglang.srt.mem_cache.triton_ops.allocator", "sglang.srt.mem_cache.allocator")
ADAPTERS = ("triton_extend", "triton_decode")


@functools.cache
def kernels():
    """(alloc_extend_kernel, alloc_decode_kernel). A failure is not cached: installing sglang
    mid-session works on the next try."""
    interpret = use_interpreter_without_cuda()
    name = next((name for name in (KERNELS, *EARLIER) if _defines(name, "alloc_extend_kernel")),
                KERNELS)
    try:
        with prepare_import(name):
            module = importlib.import_module(name)
    except ImportError as error:
        raise ImplementationError(f"upstream Triton kernels: cannot import {name} ({error}); "
                                  f"install it as docs/upstream-sglang.md says") from None
    from triton.runtime.interpreter import InterpretedFunction  # triton is loaded by now

    pair = (module.alloc_extend_kernel, module.alloc_decode_kernel)
    if interpret and not all(isinstance(kernel, InterpretedFunction) for kernel in pair):
        # Triton was imported (e.g. by sglang's allocator, named first) before TRITON_INTERPRET
        # was set: its kernels and tl.sum are then compiled-only, and cannot run on the CPU.
        raise ImplementationError("upstream Triton kernels: triton was imported before "
                                  "TRITON_INTERPRET=1 was set; set it in the environment")
    return pair


def _defines(module_name: str, name: str) -> bool:
    """Whether `module_name` exists and its source defines `name` (read, not imported)."""
    if not module_exists(module_name):
        return False
    origin = importlib.util.find_spec(module_name).origin
    try:
        with open(origin, encoding="utf-8", errors="replace") as handle:
            return f"def {name}(" in handle.read()
    except (OSError, TypeError):
        return False


def _next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _triton_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    """Upstream launch (PagedTokenToKVPoolAllocator.alloc_extend): grid (bs,), constexprs
    next_power_of_2(bs) and page_size. An empty batch is not launched (a zero-width arange)."""
    extend_kernel, _ = kernels()
    bs = seq_lens.shape[0]
    if bs == 0:
        return
    extend_kernel[(bs,)](prefix_lens, seq_lens, last_loc, free_pages, out_indices,
                         _next_power_of_2(bs), page_size)


def _triton_decode(seq_lens, last_loc, free_pages, out_indices, page_size, num_new_pages):
    """Upstream decode launch; the allocator's capacity check (num_new_pages against the pool)
    happens before it in sglang and is the harness's contract check here."""
    _, decode_kernel = kernels()
    bs = seq_lens.shape[0]
    if bs == 0:
        return
    decode_kernel[(bs,)](seq_lens, last_loc, free_pages, out_indices, _next_power_of_2(bs),
                         page_size)


def __getattr__(name: str):
    # PEP 562: the adapters resolve only when sglang imports, so a registry lookup of
    # `...upstream_sglang:triton_extend` fails in one line, at resolve time, without it.
    if name in ADAPTERS:
        kernels()
        return globals()[f"_{name}"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
