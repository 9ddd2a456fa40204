"""KV-cache managers (target "kvmanager"): the released vLLM `KVCacheManager` (vllm 0.33.0), run
by default where vLLM is installed (docs/upstream-vllm.md), and its mutants. kvfuzz has no
manager of its own: the target exists to check vLLM's and classes with its interface, by import
path. Nothing heavy is imported here."""

from functools import partial

from kvfuzz.impl.kvmanager.upstream_mutants import MUTATIONS
from kvfuzz.impl.registry import MUTANT, UPSTREAM, Implementation, entry

RELEASED = "vllm.v1.core.kv_cache_manager:KVCacheManager"
_entry = partial(entry, "kvmanager", __name__)

IMPLEMENTATIONS = (
    Implementation("vllm.kvmanager", "kvmanager", RELEASED,
                   "vLLM's KVCacheManager (kvfuzz upstream fetch)", UPSTREAM,
                   default=True, requires="vllm"),
) + tuple(
    _entry(f"mutant.vllm.kvmanager.{name}", f"upstream_mutants:{name}", mutation.why, MUTANT,
           requires="vllm")
    for name, (_, mutation) in MUTATIONS.items()
)
