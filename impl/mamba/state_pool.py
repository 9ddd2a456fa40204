"""SGLang's Mamba slots before 0.5.13: the slot free list lived in the state pool itself
(`sglang.srt.mem_cache.memory_pool:MambaPool`), whose `alloc`, `free`, `clear`,
`available_size` and `free_slots` are `MambaSlotAllocator`'s (slots 1..size, the head handed
out, freed slots appended at the tail, None when too few are free), without alloc groups (the
scheduler's `HybridReqToTokenPool.alloc` took each request's slot by `alloc(1)`) and without
`schedulable_available_size`. 0.5.13 moved the free list, as it was, into `MambaSlotAllocator`.

What differs is the constructor: keyword arguments that describe the states the pool holds.
A class that takes them (`takes_state_shapes`, read from its signature, not its version) is
built on the device asked for with the smallest states its release's own shape classes
describe: one layer of one head, a one-wide state, a kernel of 2 (SGLang's `Mamba2StateShape`);
`alloc` zeroes the states of the slots it hands out, which nothing here reads. What the class
lacks is declared (`declare`). Imports SGLang only when such a class is built."""

from __future__ import annotations

import inspect
from dataclasses import replace

from kvfuzz.impl.registry import ImplementationError
from kvfuzz.strategies.mamba.profile import GROUP_CALLS, NO_GROUPS

# What kvfuzz passes a state pool: the keywords every release's MambaPool takes ...
STATE_KEYWORDS = ("size", "cache_params", "mamba_layer_ids", "device")
# ... and those it passes only where the constructor takes them (0.5.10-0.5.12 all do).
OPTIONAL_KEYWORDS = ("spec_state_size", "enable_memory_saver", "speculative_num_draft_tokens")


def _parameters(cls) -> dict:
    try:
        return dict(inspect.signature(cls).parameters)
    except (TypeError, ValueError):  # no signature to read: called as (size, device)
        return {}


def takes_state_shapes(cls) -> bool:
    """Whether `cls` is built as a state pool (its constructor takes `cache_params`)."""
    return "cache_params" in _parameters(cls)


def passed(cls) -> tuple[str, ...]:
    """The keywords `build` passes a state pool `cls`."""
    taken = _parameters(cls)
    return STATE_KEYWORDS + tuple(name for name in OPTIONAL_KEYWORDS if name in taken)


def unbuilt(cls) -> list[str]:
    """The required constructor arguments of a state pool that kvfuzz does not pass."""
    known = set(STATE_KEYWORDS + OPTIONAL_KEYWORDS)
    return [name for name, p in _parameters(cls).items()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and name not in known]


def build(cls, size: int, device: str):
    """`cls(size, device)`, or, for a state pool, the pool of `size` slots with tiny states."""
    if not takes_state_shapes(cls):
        return cls(size, device)
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape

    shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=1, n_groups=1,
                                    num_heads=1, head_dim=1, state_size=1, conv_kernel=2)
    arguments = {"size": size, "cache_params": Mamba2CacheParams(shape=shape, layers=[0]),
                 "mamba_layer_ids": [0], "device": device, "spec_state_size": size,
                 "enable_memory_saver": False, "speculative_num_draft_tokens": None}
    return cls(**{name: arguments[name] for name in passed(cls)})


def declare(impl, cls):
    """`impl` with what its class lacks declared: no group calls -> no alloc groups in its
    traces (`strategies/mamba/profile.py`); a state pool whose constructor needs more than
    kvfuzz builds cannot be driven (one line)."""
    missing = unbuilt(cls) if takes_state_shapes(cls) else []
    if missing:
        raise ImplementationError(
            f"not supported: {impl.path}'s constructor takes {', '.join(missing)}, which kvfuzz "
            f"does not build (it builds a state pool from {', '.join(STATE_KEYWORDS)})")
    if all(callable(getattr(cls, name, None)) for name in GROUP_CALLS):
        return impl
    if NO_GROUPS in impl.preconditions:
        return impl
    return replace(impl, preconditions=impl.preconditions + (NO_GROUPS,))
