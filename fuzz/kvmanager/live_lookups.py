"""The lock step's side of a live scheduler's lookup (`fuzz/kvmanager/guard.py` checks it when
the engine makes it: the scheduler may allocate nothing after it), and the caller's cap on a
lookup as both that check and an admission's `schedule` take it."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import short


class LiveLookups:
    """Mixed into `KVManagerLockstep` (its requests, model, `_hashes`, `_hit_compare`, log)."""

    @staticmethod
    def caller_cap(request, max_hit: int) -> int:
        """The cap the lock step passes for `Schedule.max_hit`: at most `num_tokens - 1`, as the
        auxiliary-output connector gives it; -1: none passed."""
        return min(max_hit, len(request.tokens) - 1) if max_hit >= 0 else -1

    def lookup_problems(self, rid: int, actual, max_hit: int = -1) -> list[tuple[str, str]]:
        """A live scheduler's lookup (capped at `max_hit`: the engine's
        `max_cache_hit_length`, -1 none), checked when it is made; a problem is logged as a
        schedule's lookup would be."""
        request = self.requests[rid]
        cap = self.caller_cap(request, max_hit)
        expected = self.model.get_computed_blocks(self._hashes(request), len(request.tokens),
                                                  cap=cap)
        problems = self._hit_compare(expected, None, actual, None)
        if problems:
            self.log.append(f"get_computed_blocks(r{rid}{f', max {cap}' if cap >= 0 else ''}) "
                            f"-> {short(expected, 60)}")
        return problems
