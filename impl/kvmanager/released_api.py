"""What an installed vLLM's KV-cache manager and its config take, read from their signatures and
code rather than from a version number: which settings a trace may ask of a class
(`released_api`, what `fuzz/kvmanager/target.py` declares a class lacking), and the settings
the driver passes it (`asked`). Split from `driver.py` so that it stays one purpose; vLLM is
imported only where a function reads its config module."""

from __future__ import annotations

from kvfuzz.impl.driver_calls import taken


def asked(fn, **settings) -> dict:
    """The trace's `settings` for `fn`: all it takes, and any other that is not at its neutral
    value (None, 0, False): a class that cannot take a setting a trace asks for fails on it,
    as it would in an engine, rather than run without it (a released class that lacks one
    declares so: `released_api`, and such traces are outside its contract)."""
    return {**taken(fn, **settings),
            **{name: value for name, value in settings.items() if value not in (None, 0, False)}}


def released_api(cls) -> dict[str, bool]:
    """Which of the engine's settings a manager class (and the installed vLLM's KV-cache
    config) takes: what a trace may ask of it."""
    from vllm.v1 import kv_cache_interface

    return {**constructors_take(kv_cache_interface),
            "in_flight": bool(taken(cls, max_in_flight_tokens=None)),
            "watermark": bool(taken(cls, watermark=0.0)),
            "whole": bool(taken(cls.allocate_slots, full_sequence_must_fit=False)),
            "scheduler": bool(taken(cls, scheduler_block_size=None)),
            "estimate": callable(getattr(cls, "estimate_cached_tokens", None)),
            "truncate": callable(getattr(cls, "truncate_computed_blocks", None)),
            "copies": callable(getattr(cls, "take_kv_cache_block_copies", None)),
            "record": callable(getattr(cls, "record_prefix_cache_stats", None)),
            "computed_ids": callable(getattr(cls, "get_block_ids_for_computed_tokens", None)),
            "connector": all(callable(getattr(cls, name, None)) for name in (
                "get_computed_blocks_for_connector", "record_blocks_for_zeroing")) and len(
                taken(cls.allocate_slots, reserved_blocks=0, skip_zeroing_group_ids=())) == 2,
            "zero_common_prefix": not asks_coordinator(cls.get_num_common_prefix_blocks),
            "hash_lookahead": bool(taken(cls, num_hash_lookahead_tokens=0)),
            "prefill_lookahead": bool(taken(cls, num_prefill_lookahead=0)),
            "shared_prefix": bool(taken(cls, enable_mamba_shared_prefix_checkpoint=False)),
            "boundary": returns_boundary(cls.get_computed_blocks),
            "hit_alone": any("to adopt" in c for c in getattr(
                getattr(cls.allocate_slots, "__code__", None), "co_consts", ())
                if isinstance(c, str))}


# The config and spec constructors the driver calls, and the fields of each that a trace's
# setting needs (`released_api`'s key -> (class, fields)): an earlier release's constructor may
# lack a field, or the module the class. A setting may need several fields: vLLM 0.29's
# MambaSpec takes `num_prefill_checkpoint_blocks` but not the `prefill_checkpoint_alignment`
# the driver passes beside it (0.30 added it), so each field is read. A field every trace
# passes (block_size, the shapes) is in every release kvfuzz drives.
CONSTRUCTOR_FIELDS = {
    "retention": ("KVCacheConfig", ("prefix_cache_retention_interval",)),
    "eagle_groups": ("KVCacheGroupSpec", ("is_eagle_group",)),
    "retained": ("SlidingWindowSpec", ("extra_retained_tokens",)),
    "local_chunk": ("ChunkedLocalAttentionSpec", ("attention_chunk_size",)),
    "mamba_mode": ("MambaSpec", ("mamba_cache_mode",)),
    "mamba_checkpoint": ("MambaSpec", ("num_prefill_checkpoint_blocks",
                                       "prefill_checkpoint_alignment")),
    "mamba_speculative": ("MambaSpec", ("num_speculative_blocks",)),
    "cross": ("CrossAttentionSpec", ("block_size",)),
    # HiSparse's host pool, and its groups' role (`hisparse_groups`)
    "hisparse": ("KVCacheConfig", ("hisparse_host_num_blocks",))}


def constructors_take(module) -> dict[str, bool]:
    """Whether `module` (the installed `vllm.v1.kv_cache_interface`) has each of
    `CONSTRUCTOR_FIELDS`' classes, its constructor taking every field named there: read from
    the signatures, as `taken` reads them."""
    takes = {}
    for key, (name, fields) in CONSTRUCTOR_FIELDS.items():
        cls = getattr(module, name, None)
        takes[key] = cls is not None and all(bool(taken(cls, **{field: None}))
                                             for field in fields)
    return takes


def returns_boundary(method) -> bool:
    """Whether `get_computed_blocks` is declared to return (blocks, hit, boundary), not
    (blocks, hit) as vLLM 0.25's does: read from its return annotation (one that cannot be
    read is taken to)."""
    import inspect

    try:
        annotation = inspect.signature(method).return_annotation
    except (TypeError, ValueError):
        return True
    text = (annotation if isinstance(annotation, str) else repr(annotation)).strip("'\"")
    if not text.startswith("tuple["):
        return True
    depth, parts = 0, 1
    for char in text[len("tuple["):-1]:
        depth += char == "["
        depth -= char == "]"
        parts += char == "," and depth == 0
    return parts != 2


def asks_coordinator(method) -> bool:
    """Whether the method's code reaches the coordinator (vLLM before 0.30 counts the common
    prefix there; 0.33's deprecated stub returns zeros without it): read from its names."""
    return "coordinator" in getattr(getattr(method, "__code__", None), "co_names", ())
