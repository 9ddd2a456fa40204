"""The "blockpool" target: a block pool with vLLM `BlockPool`'s interface driven over
manager-like traces, in lock step with the oracle (`lockstep.py`).

    kvfuzz diff blockpool --cases 2000 --jobs 2
    kvfuzz diff blockpool --impl vllm.v1.core.block_pool:BlockPool
Each implementation gets the traces it supports (a pool whose callers never double-free says
so, strategies/blockpool/profile.py); a trace from elsewhere with a double free is outside its
contract. Imports vLLM only when a trace runs.
"""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import replace

from kvfuzz.fuzz.blockpool.lockstep import BlockPoolLockstep
from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.impl.blockpool import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.blockpool import codec, generator, uniform
from kvfuzz.strategies.blockpool.profile import (DECLARABLE, NO_BOUNDARY, NO_LOOKAHEAD, NO_MASK,
                                                NO_MOVE, NO_REPLACE, NO_REPORT, NO_SCALE,
                                                NO_UNPIN, broken)
from kvfuzz.strategies.blockpool.trace import CREATES, FORMAT, describe_op, to_json

METHODS = ("get_new_blocks", "touch", "free_blocks", "cache_full_blocks", "get_cached_block",
           "evict_blocks", "reset_prefix_cache", "get_num_free_blocks", "unpin_blocks")
KEYWORDS = ("num_gpu_blocks", "enable_caching", "hash_block_size")  # the driver's constructor call


def _shape(path, obj):
    check_shape(path, obj, 0, "a class with vLLM BlockPool's interface", cls=True,
                methods=METHODS, keywords=KEYWORDS)


def _declare(impl, obj):
    """What a pool class (an earlier vLLM release's) lacks, read from the class: a call it
    does not have (`unpin_blocks`, `move_block_hashes`, `emit_cached_block_events`), a keyword
    its constructor, `cache_partial_block` or `cache_full_blocks` does not take, a block of
    several hash units keyed by their hashes joined; its traces then make none."""
    lacks = [text for text, has in (
        (NO_UNPIN, callable(getattr(obj, "unpin_blocks", None))),
        (NO_MOVE, callable(getattr(obj, "move_block_hashes", None))),
        (NO_REPORT, callable(getattr(obj, "emit_cached_block_events", None))),
        (NO_LOOKAHEAD, _takes(obj, "num_hash_lookahead_tokens")),
        (NO_REPLACE, _takes(getattr(obj, "cache_partial_block", None),
                            "replace_existing_hashes")),
        (NO_BOUNDARY, not _asserts_inside(getattr(obj, "cache_partial_block", None))),
        (NO_SCALE, not joins_units(obj)),
        (NO_MASK, _takes(getattr(obj, "cache_full_blocks", None), "block_mask"))) if not has]
    added = tuple(text for text in lacks if text not in impl.preconditions)
    return replace(impl, preconditions=impl.preconditions + added) if added else impl


# vLLM 0.30's and 0.31's `cache_partial_block`: `assert replace_existing_hashes or (... and
# num_tokens % block_size != 0)`, a refusal of a non-replacing entry at a block boundary that no
# signature shows (0.32 drops it); read from the source, as `swa`'s power-of-two page size is.
_INSIDE = re.compile(r"assert\s+replace_existing_hashes\s+or\b[^\n]*\n?[^\n]*%\s*block_size")


def _asserts_inside(call) -> bool:
    """Whether `call`'s source asserts a non-replacing partial entry inside a block (one whose
    source cannot be read is taken not to)."""
    try:
        return bool(_INSIDE.search(inspect.getsource(call)))
    except (OSError, TypeError):
        return False


def joins_units(obj) -> bool:
    """Whether the pool's module keys a block of two hash units by both units' hashes joined
    (vLLM 0.20's `BlockHashListWithBlockSize`), asked of that class on two 8-byte hashes. A
    module without it (0.25 on imports none) keys as it keys: the judge compares."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    scaled = getattr(module, "BlockHashListWithBlockSize", None)
    if not callable(scaled):
        return False
    try:
        return len(bytes(scaled([bytes(8), bytes([1]) * 8], 1, 2)[0])) > 8
    except Exception:  # noqa: BLE001 - another shape: not the joining one
        return False


def _takes(call, keyword: str) -> bool:
    """Whether `call` takes `keyword` (one it cannot be read for is taken to)."""
    try:
        parameters = inspect.signature(call).parameters
    except (TypeError, ValueError):
        return call is not None
    return keyword in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _generator_for(impls):
    return generator.generator_for(frozenset().union(*(impl.preconditions for impl in impls)))


def smaller_pool(item):
    if item.blocks > 2:
        yield replace(item, blocks=item.blocks - 1)


BLOCKPOOL = trace_target(
    "blockpool",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "pool",
                     max_ops=codec.MAX_OPS),
    inputs=TraceInputs(generator.GENERATOR, _generator_for, uniform.uniform_trace),
    judge=LockstepJudge(BlockPoolLockstep, describe_op, broken),
    catalogue=Catalogue("blockpool", IMPLEMENTATIONS, _shape, _declare, declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), item.blocks), CREATES, smaller_pool),
    coverage_modules=("kvfuzz.fuzz.blockpool.lockstep", "kvfuzz.oracle.blockpool.model"),
    live="kvfuzz.fuzz.blockpool.guard:guard")
