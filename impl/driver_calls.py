"""What the drivers of stateful allocator classes share: results read out as plain ints with
their shape checked, and the caller's tensors overwritten after each call."""

from __future__ import annotations

import torch

from kvfuzz.impl.poison import POISON  # noqa: F401  (the drivers' callers read it from here too)


def int_list(result):
    """A result as a flat list of ints (None stays None); any other shape is the implementation's
    fault."""
    if result is None:
        return None
    if not isinstance(result, torch.Tensor) or result.dim() != 1 or result.is_floating_point():
        raise TypeError(f"returned {type(result).__name__} "
                        f"{getattr(result, 'shape', '')}, expected a 1-D integer tensor")
    return result.tolist()


def then_poison(result, *passed: torch.Tensor):
    """`result` read out first, then every tensor the caller passed overwritten with POISON."""
    for tensor in passed:
        tensor.fill_(POISON)
    return result


def free_list_of(allocator) -> list[int]:
    """A token or paged allocator's free list (`free_pages`), head first."""
    return int_list(allocator.free_pages)


def staged_of(allocator) -> list[int]:
    """need_sort's staged pages (`staged_pages`; `release_pages` in older upstream shapes and in
    the token allocator)."""
    chunks = getattr(allocator, "staged_pages", None)
    if chunks is None:
        older = getattr(allocator, "release_pages", None)
        chunks = [] if older is None else [older]
    return [page for chunk in chunks for page in int_list(chunk)]
