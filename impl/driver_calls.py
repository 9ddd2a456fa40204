"""What the drivers of stateful allocator classes share: results read out as plain ints with
their shape checked, and the caller's tensors overwritten after each call."""

from __future__ import annotations

import functools
import inspect

import torch

from kvfuzz.impl.poison import POISON  # noqa: F401  (the drivers' callers read it from here too)


def int_list(result):
    """A result as a flat list of plain ints (None stays None); any other shape or dtype is the
    implementation's fault: slots and pages are int64 in every contract (an int32 tensor holds
    the same small values, and wraps at 2**31 in a long-running engine). Read through torch's
    own methods with subclass overrides switched off: a tensor subclass whose `tolist()` (or
    `__torch_function__`) lies reads as what it holds."""
    if result is None:
        return None
    if not isinstance(result, torch.Tensor):
        raise TypeError(f"returned {type(result).__name__}, expected a 1-D int64 tensor")
    with torch._C.DisableTorchFunctionSubclass():
        plain = torch.Tensor.as_subclass(result, torch.Tensor)
        if plain.dim() != 1 or plain.dtype != torch.int64:
            raise TypeError(f"returned a {plain.dtype} tensor of shape {tuple(plain.shape)}, "
                            f"expected a 1-D int64 tensor")
        return torch.Tensor.tolist(plain)


def taken(fn, **settings) -> dict:
    """Those of `settings` that `fn` (a callable, or a class's constructor) takes by name."""
    fn = getattr(fn, "__func__", fn)  # a bound method: its function's names (and `self`)
    try:
        names = _names(fn)
    except TypeError:  # not hashable: read afresh
        names = _names.__wrapped__(fn)
    if names is None:
        return settings
    return {name: value for name, value in settings.items() if name in names}


@functools.lru_cache(maxsize=256)
def _names(fn) -> frozenset | None:
    """The names `fn` takes (None: any name, or no signature to read). Cached: a driver asks
    on every call of a method (`allocate_slots`, a thousand times a trace), and reading a
    signature was a tenth of a trace's time in the implementation's process."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    return frozenset(parameters)


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


class TensorDriver:
    """The calls every driver makes alike: plain ints in as int64 tensors on its device, results
    out as plain ints, the caller's tensors poisoned after each call. `allocator` is the object
    driven; `host_copies`: the host-side length tensors are separate tensors even on the CPU
    (else they are the device ones there, as a CPU scheduler passes them)."""

    allocator: object
    device: str = "cpu"
    host_copies = False

    def _tensor(self, values, device=None) -> torch.Tensor:
        return torch.tensor(list(values), dtype=torch.int64, device=device or self.device)

    def _host(self, device_tensor, values) -> torch.Tensor:
        shared = self.device == "cpu" and not self.host_copies
        return device_tensor if shared else self._tensor(values, "cpu")

    def _extend(self, method: str, prefix_lens, seq_lens, last_loc, *extra, **options):
        """`allocator.<method>(prefix, prefix_cpu, seq, seq_cpu, last_loc, tokens, *extra)`."""
        prefix, seq, last = self._tensor((*prefix_lens, *seq_lens, *last_loc)).view(3, -1)
        host = (self._host(prefix, prefix_lens), self._host(seq, seq_lens))
        tokens = sum(s - q for q, s in zip(prefix_lens, seq_lens))
        result = getattr(self.allocator, method)(prefix, host[0], seq, host[1], last, tokens,
                                                 *extra, **options)
        return then_poison(int_list(result), prefix, seq, last, *host)

    def alloc_decode(self, seq_lens, last_loc):
        seq, last = self._tensor((*seq_lens, *last_loc)).view(2, -1)
        host = self._host(seq, seq_lens)
        return then_poison(int_list(self.allocator.alloc_decode(seq, host, last)), seq, last, host)

    def _release(self, method: str, slots, **options) -> None:
        index = self._tensor(slots)
        then_poison(getattr(self.allocator, method)(index, **options), index)

    def alloc(self, need_size: int):
        return int_list(self.allocator.alloc(need_size))

    def clear(self) -> None:
        self.allocator.clear()

    def available_size(self) -> int:
        return int(self.allocator.available_size())
