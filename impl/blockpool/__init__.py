"""Block pools (target "blockpool"): the released vLLM `BlockPool` (vllm 0.33.0), run by default
where vLLM is installed (docs/upstream-vllm.md), and its mutants. kvfuzz has no block pool of its
own: the target exists to check vLLM's and classes with its interface, by import path.
Nothing heavy is imported here."""

from functools import partial

from kvfuzz.impl.blockpool.upstream_mutants import MUTATIONS
from kvfuzz.impl.registry import MUTANT, UPSTREAM, Implementation, entry
from kvfuzz.strategies.blockpool.profile import NO_DOUBLE_FREE

RELEASED = "vllm.v1.core.block_pool:BlockPool"
UPSTREAM_DECLARES = (NO_DOUBLE_FREE,)  # its free_blocks does not check (docs/upstream-vllm.md)
_entry = partial(entry, "blockpool", __name__)

IMPLEMENTATIONS = (
    Implementation("vllm.blockpool", "blockpool", RELEASED,
                   "vLLM's BlockPool (kvfuzz upstream fetch)", UPSTREAM,
                   preconditions=UPSTREAM_DECLARES, default=True, requires="vllm"),
) + tuple(
    _entry(f"mutant.vllm.blockpool.{name}", f"upstream_mutants:{name}", mutation.why, MUTANT,
           requires="vllm", preconditions=UPSTREAM_DECLARES)
    for name, mutation in MUTATIONS.items()
)
