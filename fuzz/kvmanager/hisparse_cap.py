"""The caller's cap beside HiSparse's groups (the "capped hisparse" profile, since 2026-12-07),
mixed into `HiSparseLockstep`. With auxiliary outputs on, vLLM 0.33.0's scheduler passes the
auxiliary-output connector's `max_cache_hit` to every admission's lookup (`Scheduler.schedule`
1117-1127), HiSparse's included: nothing in its configuration excludes the pair, and no HiSparse
code reads the cap; it acts through the manager's own lookup:

- `get_computed_blocks(request, cap)` (or `get_computed_blocks_for_connector`, which without a
  Mamba group returns the same), the cap at most `num_tokens - 1` (`connector_cap.lookup_cap`):
  the hybrid coordinator's fixed point starts from the cap, so the source group's host lookup
  (`HiSparseSourceManager`, `retains_longer_hit`: never trimmed to the joined hit) runs to the
  cap at most, and the indexer's to the source's; the hit is at most the cap and the source's
  retained hit at most the cap's whole hash units (with a Mamba "align" group hashed per fewer
  tokens than a block, "hisparse cow", the block the last unit lies in too);
- the connector's external tokens: HiSparse's own connector reports none
  (`get_num_new_matched_tokens`: 0), so `cap_external_hit` keeps the none; a second
  connector's import into the host pool ("hisparse import") keeps its tokens only where
  `connector_cap.ConnectorCap.capped_external` does (the hit and they end on a block at most
  at the cap), and an asynchronous load without them is none: the admission is then a plain
  one of the local hit;
- after the lookup nothing of HiSparse reads the cap: the admission adopts the hit's blocks, and
  the coordinator's residency work follows the computed tokens, as without one.

Checked: the hit and the source's retained blocks within the cap (with a Mamba group, the
exact hit over both pools' entries takes the cap for `num_tokens - 1`:
`hisparse_cow.hit_length_problems`). Counted: the lookups capped, and those whose hit the cap
cut (the pools' entries at the last read reach past it, joined as the coordinator joins the
source and the indexer).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, short
from kvfuzz.fuzz.kvmanager.connector_cap import cap_text, capped_args, lookup_cap
from kvfuzz.fuzz.kvmanager.hisparse_checks import INDEXER, SOURCE
from kvfuzz.fuzz.kvmanager.hisparse_cow import entries_of
from kvfuzz.oracle.kvmanager import align_hit
from kvfuzz.oracle.kvmanager.hybrid import cdiv

CAPPED = "HiSparse: a lookup capped by the caller"
CUT = "HiSparse: a hit the caller's cap cut"
EVENTS = (CAPPED, CUT)


class HiSparseCap:
    """Mixed into `HiSparseLockstep` (its trace, unit, pools' keys and `count`)."""

    def hisparse_cap(self, request, max_hit: int) -> int:
        """The cap an admission's lookup takes (-1: none), kept on the request for its
        checks."""
        request.cap = lookup_cap(max_hit, len(request.tokens))
        if request.cap >= 0:
            self.count(CAPPED)
        return request.cap

    def capped_lookup(self, method: str, rid: int, request, max_hit: int, compare) -> Call:
        """An admission's lookup (`method`: the driver's `get_computed_blocks` or
        `connector_lookup`), the cap passed only where the caller gives one."""
        cap = self.hisparse_cap(request, max_hit)
        name = "get_computed_blocks_for_connector" if method == "connector_lookup" else method
        return Call(f"{name}(r{rid}{cap_text(cap)})", method, capped_args(rid, cap),
                    oracle=None, compare=compare)

    def lookup_limit(self, request) -> int:
        """What the lookup may hit at most: the cap, else `num_tokens - 1`."""
        return request.cap if request.cap >= 0 else max(len(request.tokens) - 1, 0)

    def cap_problems(self, request, hit: int, source) -> list[tuple[str, str]]:
        cap, size = request.cap, self.trace.block_size
        if cap < 0 or request.skip:
            return []
        top = cdiv(cap - cap % self.unit, size)  # (the source's blocks the cap's units reach)
        if hit > cap or len(source) > top:
            return [("prefix hit", f"expected {cap} tokens at most (the caller's cap; blocks "
                                   f"of {size}, hashed per {self.unit}) and at most {top} "
                                   f"source blocks, actual hit {hit}, source {short(source)}")]
        if self.reach(request) > cap:  # (the pools held more than the cap lets it take)
            self.count(CUT)
        return []

    def reach(self, request) -> int:
        """The hit without the cap as the pools' entries at the last read give it: the source's
        host run to `num_tokens - 1`, the indexer's device run within it."""
        units, size = request.hashes(self.unit), self.trace.block_size
        host = align_hit.full_attention_hit(units, max(len(request.tokens) - 1, 0), size,
                                            self.unit, entries_of(self.host_keys, SOURCE))
        return align_hit.full_attention_hit(units, host, size, self.unit,
                                            entries_of(self.device_keys, INDEXER))
