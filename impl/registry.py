"""Implementations by name: the bundled ones, the mutant catalogue, and outside code by import path.

A name maps to an import path resolved only when the implementation is used, so listing or
choosing one never imports torch, Triton or a user's package.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

BUNDLED = "bundled"
MUTANT = "mutant"
OUTSIDE = "outside"
# Our Triton kernels: run only when named (--impl triton). Under the CPU interpreter a case costs
# tens of milliseconds, too slow for the default set every `kvfuzz diff` and seeded test runs.
KERNEL = "kernel"


class ImplementationError(ValueError):
    """A user named an implementation that does not exist or does not load; one-line message."""


@dataclass(frozen=True)
class Implementation:
    name: str
    target: str
    path: str      # "package.module:attr", attr may be dotted
    summary: str
    kind: str = BUNDLED
    # Preconditions beyond the common contract, by name from oracle.contract.EXTRA_PRECONDITIONS
    # (e.g. Triton's power-of-two page size): cases violating them are outside its contract.
    preconditions: tuple[str, ...] = ()
    # False when a call outside the contract may crash the process (an out-of-bounds device
    # read): the engine then records "not run" instead of calling it.
    safe_outside_contract: bool = True

    def load(self):
        return load_attribute(self.path)


def _entry(target, name, path, summary, kind=BUNDLED, **options):
    return Implementation(name, target, path, summary, kind, **options)


_ENTRIES = (
    _entry("extend", "torch.vectorized", "kvfuzz.impl.paged.vectorized:alloc_extend",
           "vectorized torch, one gather per slot, no host sync"),
    _entry("extend", "torch.three_phase", "kvfuzz.impl.paged.three_phase:alloc_extend",
           "upstream formulation of PR #37938 (searchsorted, three phases)"),
    _entry("extend", "torch.loop", "kvfuzz.impl.paged.loop:alloc_extend",
           "per-request loop, as upstream before PR #37938"),
    _entry("decode", "torch.vectorized", "kvfuzz.impl.paged.vectorized:alloc_decode",
           "vectorized torch, exclusive rank of page-opening requests"),
    _entry("decode", "torch.three_phase", "kvfuzz.impl.paged.three_phase:alloc_decode",
           "upstream alloc_decode_naive formulation (trusts num_new_pages)"),
    _entry("decode", "torch.loop", "kvfuzz.impl.paged.loop:alloc_decode", "per-request loop"),
    _entry("extend", "mutant.no_empty_pool_guard",
           "kvfuzz.impl.paged.mutants:extend_without_empty_pool_guard",
           "gathers from an empty pool (PR #37938 bug 1)", MUTANT),
    _entry("extend", "mutant.no_clamp", "kvfuzz.impl.paged.mutants:extend_without_clamp",
           "dead-branch indices unclamped (PR #37938 bug 2)", MUTANT),
    _entry("extend", "mutant.owner_left_bisect", "kvfuzz.impl.paged.mutants:extend_owner_left_bisect",
           "owner lookup wrong for zero-length requests", MUTANT),
    _entry("extend", "mutant.inclusive_page_start",
           "kvfuzz.impl.paged.mutants:extend_inclusive_page_start",
           "pool slice starts at the inclusive prefix sum", MUTANT),
    _entry("decode", "mutant.inclusive_rank", "kvfuzz.impl.paged.mutants:decode_inclusive_rank",
           "page rank by inclusive cumsum", MUTANT),
    _entry("decode", "mutant.opens_page_off_by_one",
           "kvfuzz.impl.paged.mutants:decode_opens_page_off_by_one",
           "tests seq % P == 0 for a page-opening token", MUTANT),
    # Triton (issue 6). Ours masks every access by its tensor's length, so it is safe to run
    # outside the contract; upstream reads past a short pool (a segfault under the interpreter).
    _entry("extend", "triton", "kvfuzz.impl.paged.triton_kernels:alloc_extend",
           "Triton kernel, one program per request (interpreted without CUDA)", KERNEL,
           preconditions=("power-of-two page size",)),
    _entry("decode", "triton", "kvfuzz.impl.paged.triton_kernels:alloc_decode",
           "Triton kernel, one program per request (interpreted without CUDA)", KERNEL,
           preconditions=("power-of-two page size",)),
    _entry("extend", "sglang.triton", "kvfuzz.impl.paged.upstream_sglang:triton_extend",
           "upstream sglang alloc_extend_kernel (needs sglang installed)", OUTSIDE,
           preconditions=("power-of-two page size",), safe_outside_contract=False),
    _entry("decode", "sglang.triton", "kvfuzz.impl.paged.upstream_sglang:triton_decode",
           "upstream sglang alloc_decode_kernel (needs sglang installed)", OUTSIDE,
           preconditions=("power-of-two page size",), safe_outside_contract=False),
) + tuple(
    # Triton mutants: the kernel source with one edit each (impl/mutants/triton.py).
    _entry(target, f"mutant.triton.{name}", f"kvfuzz.impl.paged.triton_mutants:{target}_{name}", summary,
           MUTANT, preconditions=("power-of-two page size",))
    for target, name, summary in (
        ("extend", "inclusive_prefix", "prefix sums include the request itself"),
        ("extend", "garbage_lanes", "masked prefix-sum lanes read 1, not 0"),
        ("extend", "phase2_at_start", "whole-page phase writes over phase 1"),
        ("extend", "last_page_plus_one", "last partial page one past the slice"),
        ("decode", "inclusive_rank", "page rank counts the request itself"),
        ("decode", "counts_masked", "masked lanes counted as page openers (P == 1)"),
    )
)


def implementations(target: str | None = None, kind: str | None = None) -> list[Implementation]:
    return [entry for entry in _ENTRIES
            if (target is None or entry.target == target) and (kind is None or entry.kind == kind)]


def targets() -> list[str]:
    return sorted({entry.target for entry in _ENTRIES})


def resolve(target: str, spec: str) -> Implementation:
    """A registered name for `target`, or an outside implementation `package.module:attr`."""
    if ":" in spec:
        load_attribute(spec)  # fail now, with one line, rather than deep inside a run
        for entry in _ENTRIES:  # a registered path keeps its preconditions and safety
            if entry.target == target and entry.path == spec:
                return entry
        return Implementation(spec, target, spec, "outside implementation", OUTSIDE)
    for entry in _ENTRIES:
        if entry.target == target and entry.name == spec:
            return entry
    known = ", ".join(entry.name for entry in implementations(target)) or "none"
    raise ImplementationError(f"unknown implementation {spec!r} for target {target!r} "
                              f"(known: {known}; or give package.module:attr)")


def load_attribute(path: str):
    """Import `package.module:attr` (attr may be dotted, e.g. `Class.method`)."""
    module_name, _, attr_path = path.partition(":")
    if not module_name or not attr_path:
        raise ImplementationError(f"import path {path!r}: expected package.module:attr")
    try:
        obj = importlib.import_module(module_name)
    except Exception as error:  # a broken outside module is the user's to fix: one line
        raise ImplementationError(f"import path {path!r}: cannot import {module_name!r}: "
                                  f"{error}") from None
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ImplementationError(f"import path {path!r}: {module_name!r} has no attribute "
                                      f"{attr_path!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ImplementationError(f"import path {path!r}: {attr_path!r} is not callable")
    return obj
