"""The read-only calls SGLang's scheduler, budgets, invariant checker and disaggregation code
make on an SWA allocator, read after every op as plain values (each only where the class has
it; the lock step says what each must be): its sizes and settings, the translation through its
KV pool (a prefill's transfer, and the "no prefix" -1 kept as -1), the capacity views, the
debug line, its KV pool, the free-page census, and the prefill budget it makes."""

from __future__ import annotations

# Capacities handed to `swa_capacity_and_available`, which it must hand back beside each pool's
# available size (the caller's own numbers: any will do).
CAPACITIES = (1001, 1002)


def api_reads(allocator, kvcache, mapped: list[int]) -> dict:
    """`kvcache`: the KV pool the allocator was built with (None: not known, for a live one);
    `mapped`: the full slots the mapping pairs, whose translation is read with -1 after them."""
    import torch  # here: the judge imports CAPACITIES, and no torch

    from kvfuzz.impl.driver_calls import int_list

    reads = {"need_sort": _plain(allocator.need_sort)}  # HiSparse's wrapper reads it
    for name in ("size", "size_full", "size_swa", "swa_req_ring", "swa_ring_cost_tokens"):
        if hasattr(type(allocator), name):  # the class's properties: read where it has them
            reads[name] = _plain(getattr(allocator, name))
    call = _calls(allocator)
    translate = call("translate_swa_indices_for_transfer")
    if translate:
        index = torch.tensor([*mapped, -1], dtype=torch.int64, device=_device(allocator))
        reads["translated"] = int_list(translate(index))
    capacity = call("swa_capacity_and_available")
    if capacity:
        views = capacity(full_capacity=CAPACITIES[0], swa_capacity=CAPACITIES[1])
        reads["capacity"] = [[int(n) for n in view] for view in views]
    full, swa = call("_conserve_full_available_size"), call("_conserve_swa_available_size")
    if full and swa:
        reads["conserve"] = [int(full()), int(swa())]
    text = call("debug_print")
    if text:
        reads["debug_print"] = _text(text())
    kv = call("get_kvcache")
    if kv and kvcache is not None:
        reads["kvcache"] = kv() is kvcache
    census = call("get_all_free_pages")
    if census:
        pages = census()
        reads["free pages"] = int_list(pages)
    budget = call("create_prefill_budget")
    if budget:
        # a guarded allocator (`kvfuzz.guard`) lets the call through to the object it wraps,
        # which hands the budget itself
        itself = getattr(allocator, "_kvfuzz_object", allocator)
        reads["budget"] = getattr(budget(None), "allocator", None) is itself
    return reads


def _calls(allocator):
    def call(name: str):
        method = getattr(allocator, name, None)
        return method if callable(method) else None
    return call


def _device(allocator) -> str:
    return getattr(allocator, "device", "cpu")


def _plain(value) -> bool | int | str:
    return value if isinstance(value, (bool, int)) else repr(value)


def _text(value) -> str:
    return value if isinstance(value, str) else f"not a string: {type(value).__name__}"
