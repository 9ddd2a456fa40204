"""The lock step's side of a live scheduler's lookup (`fuzz/kvmanager/guard.py` checks it when
the engine makes it: the scheduler may allocate nothing after it), and the caller's cap on a
lookup as that check takes it (`connector_cap.lookup_cap`, as an admission's `schedule` and a
`connect` take it)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import short
from kvfuzz.fuzz.kvmanager.connector_cap import cap_text, lookup_cap


class LiveLookups:
    """Mixed into `KVManagerLockstep` (its requests, model, `_hashes`, `_hit_compare`, log)."""

    def lookup_problems(self, rid: int, actual, max_hit: int = -1) -> list[tuple[str, str]]:
        """A live scheduler's lookup (capped at `max_hit`: the engine's
        `max_cache_hit_length`, -1 none), checked when it is made; a problem is logged as a
        schedule's lookup would be."""
        request = self.requests[rid]
        cap = lookup_cap(max_hit, len(request.tokens))  # (at most num_tokens - 1)
        expected = self.model.get_computed_blocks(self._hashes(request), len(request.tokens),
                                                  cap=cap)
        problems = self._hit_compare(expected, None, actual, None)
        if problems:
            self.log.append(f"get_computed_blocks(r{rid}{cap_text(cap)}) -> "
                            f"{short(expected, 60)}")
        return problems
