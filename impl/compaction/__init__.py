"""Lazy-compaction allocator in torch (target "compaction"): the catalogue of factories
`factory(params, device="cpu") -> TorchCompaction`. Nothing heavy is imported here."""

from functools import partial

# UPSTREAM_POOL: what the upstream entries adapt, for `kvfuzz mutate` (the adapter is kvfuzz's).
from kvfuzz.impl.compaction.released import UPSTREAM_POOL
from kvfuzz.impl.compaction.upstream_mutants import MUTATIONS
from kvfuzz.impl.registry import BASELINE, MUTANT, UPSTREAM, entry

_entry = partial(entry, "compaction", __name__)


IMPLEMENTATIONS = (
    _entry("compaction.lazy", "allocator:lazy",
           "lazy free into holes, batched flush and commit (spec §3)"),
    _entry("compaction.eager", "allocator:eager", "eager free: compacts inside free, never a hole"),
    _entry("compaction.before", "allocator:before",
           "lazy, commit with one host read per page (before PR 34066)", BASELINE),
    _entry("mutant.compaction.pending_replaced", "mutants:pending_replaced",
           "a second pending batch replaces the first", MUTANT),
    _entry("mutant.compaction.p2v_not_cleared", "mutants:p2v_not_cleared",
           "commit leaves p2v of its sources bound", MUTANT),
    _entry("mutant.compaction.kv_not_moved", "mutants:kv_not_moved",
           "commit remaps the tables, never copies KV rows", MUTANT),
    _entry("mutant.compaction.clear_keeps_pending", "mutants:clear_keeps_pending",
           "clear() keeps the pages pending on an unfired event", MUTANT),
    _entry("mutant.compaction.clear_keeps_group", "mutants:clear_keeps_group",
           "clear() keeps the open free group", MUTANT),
    _entry("mutant.compaction.clear_keeps_reservations", "mutants:clear_keeps_reservations",
           "clear() keeps the HiCache load-back reservations", MUTANT),
    _entry("mutant.compaction.reserve_tokens_as_pages", "mutants:reserve_tokens_as_pages",
           "a load-back reservation takes its size in tokens as pages", MUTANT),
    _entry("mutant.compaction.frees_pages_as_named", "mutants:frees_pages_as_named",
           "a free above page size 1 releases pages as named, not ascending", MUTANT),
    # Upstream MultiEndedAllocator pairs on one UnifiedKVPool (sglang 0.5.23), by adapter.
    _entry("sglang.compaction.lazy", "upstream:lazy",
           "upstream MultiEndedAllocator, lazy_compaction=True (needs sglang)", UPSTREAM,
           requires="sglang", mutates=(UPSTREAM_POOL,)),
    # The same without the fresh-page property: where a release hands out pages unzeroed
    # (SGLang 0.5.20-0.5.22, docs/release-history.md N) every lazy trace stops at that check,
    # so a history run sees nothing behind it; this entry is the pass that does.
    _entry("sglang.compaction.lazy.unzeroed", "upstream:lazy_unzeroed",
           "upstream MultiEndedAllocator, lazy, without the fresh-page check (needs sglang)",
           UPSTREAM, requires="sglang", mutates=(UPSTREAM_POOL,)),
    _entry("sglang.compaction.eager", "upstream:eager",
           "upstream MultiEndedAllocator, lazy_compaction=False (needs sglang)", UPSTREAM,
           requires="sglang", mutates=(UPSTREAM_POOL,)),
    # The same for eager: its vacated pages come back unzeroed on 0.5.15-0.5.22 as well (N).
    _entry("sglang.compaction.eager.unzeroed", "upstream:eager_unzeroed",
           "upstream MultiEndedAllocator, eager, without the fresh-page check (needs sglang)",
           UPSTREAM, requires="sglang", mutates=(UPSTREAM_POOL,)),
) + tuple(
    _entry(f"mutant.sglang.compaction.{name}", f"upstream_mutants:{name}", mutation.why, MUTANT,
           requires="sglang")
    for name, mutation in MUTATIONS.items()
)
