"""A Mamba group's own block size in mode "none" or "all" (the "mamba" profile's share,
`strategies/kvmanager/mamba_block.py`): vLLM's config makes it the model's length with prefix
caching off. The codec takes it there only; the released manager agrees on the share's traces,
and a manager that builds the Mamba group at full attention's block size is caught on them."""

from __future__ import annotations

import functools
import random
from dataclasses import replace

import pytest

from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec, hybrid, mamba_block, mamba_speculative
from kvfuzz.strategies.kvmanager.limits import MAX_BLOCK_SIZE
from kvfuzz.strategies.kvmanager.streams import ALONE
from kvfuzz.strategies.kvmanager.trace import to_json
from kvfuzz.strategies.sources import TraceGenerator
from tests.helpers import divergence, needs_engine

MAMBA = ALONE["mamba"]


def _shared(count: int) -> list[int]:
    """The first `count` indices of seed 0's "mamba" stream in the share."""
    found = [i for i in range(400) if MAMBA.generate(0, i).window_block_size]
    return found[:count]


def test_the_share_gives_the_mamba_group_the_models_length_and_nothing_else():
    shared = 0
    for index in range(120):
        trace = MAMBA.generate(0, index)
        if not trace.window_block_size:
            continue
        shared += 1
        assert trace.mamba_mode in ("none", "all") and not trace.caching and not trace.window
        assert trace.window_block_size == trace.max_model_len != trace.block_size
        assert trace.sizes == (trace.block_size, trace.max_model_len)
        assert codec.from_json(to_json(trace)) == trace  # (past MAX_BLOCK_SIZE: the codec's
        # bound for a Mamba group's block is the model's length bound)
    assert 25 <= shared <= 55, shared  # a third of 120, give or take


def test_the_share_leaves_the_profiles_other_traces_and_fields_as_they_were():
    """Seed 0's first 100: the traces the draw before the share made (multi-token
    prediction's, `mamba_speculative.drawn` over `build_mamba`), those in the share with the
    Mamba group's block size alone added."""
    before = TraceGenerator(hybrid.MAMBA.name, lambda rng, num_ops: mamba_speculative.drawn(
        rng, hybrid.build_mamba(rng, num_ops)), num_ops=200, max_fuzz_ops=200)
    for index in range(100):
        old, new = before.generate(0, index), MAMBA.generate(0, index)
        assert replace(new, window_block_size=0) == old, index


def test_outside_the_share_the_trace_is_unchanged():
    trace = MAMBA.generate(0, 0)
    rng = random.Random(1)
    draws = [rng.random() for _ in range(5)]
    unchanged = [i for i, d in enumerate(draws) if d >= mamba_block.SHARE]
    assert unchanged  # (seed 1 draws at least one outside the share in five)
    rng = random.Random(1)
    for index in range(5):
        out = mamba_block.drawn(rng, trace)
        assert (out == trace) == (index in unchanged)


def test_the_codec_refuses_a_second_block_size_without_a_window_or_plain_mamba_group():
    trace = MAMBA.generate(0, _shared(1)[0])
    data = to_json(trace)
    with pytest.raises(FormatError, match="window_block_size"):
        codec.from_json({**data, "mamba_mode": "", "mamba_speculative": 0})
    data = to_json(trace.__class__(8, 4, 3, 64, trace.ops[:0], None, window_block_size=8))
    assert codec.from_json(data).window_block_size == 8  # (a window's: its own bound)
    with pytest.raises(FormatError, match="window_block_size"):
        codec.from_json({**data, "window_block_size": MAX_BLOCK_SIZE * 2})


@functools.cache
def _broken() -> type:
    """The released manager with the Mamba group built at full attention's block size (the
    trace's one size, as kvfuzz's driver built every Mamba group before 2026-12-08)."""
    from dataclasses import replace

    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")
    MambaSpec = load_attribute("vllm.v1.kv_cache_interface:MambaSpec")

    class MambaAtAttentionSize(KVCacheManager):
        def __init__(self, kv_cache_config, *args, **kwargs):
            groups = kv_cache_config.kv_cache_groups
            full = groups[0].kv_cache_spec.block_size
            for group in groups:
                if isinstance(group.kv_cache_spec, MambaSpec):
                    group.kv_cache_spec = replace(group.kv_cache_spec, block_size=full)
            super().__init__(kv_cache_config, *args, **kwargs)

    return MambaAtAttentionSize


def __getattr__(name):  # the double by import path: tests.kvmanager.test_mamba_block:...
    if name == "MambaAtAttentionSize":
        return _broken()
    raise AttributeError(name)


_ENGINE = needs_engine("vllm")


@_ENGINE[0]
@_ENGINE[1]
def test_the_release_agrees_on_the_share_and_a_mamba_group_at_attention_size_is_caught():
    """The share's first eight traces: the release agrees on all; the double is caught on the
    five whose counts the Mamba group's size moves (6, 12 and 15, short models whose one live
    state block is the same either way, it passes)."""
    caught = set()
    for index in _shared(8):
        trace = MAMBA.generate(0, index)
        assert divergence("kvmanager", trace, "vllm.kvmanager") is None, index
        if divergence("kvmanager", trace, f"{__name__}:MambaAtAttentionSize") is not None:
            caught.add(index)
    assert caught == {4, 19, 21, 26, 28}, caught
