"""The `kvmanager` judge's reads after every op (`KVManagerLockstep.state`): every live request's
block tables, what the scheduler reads of the request the op moved, what it drains every step
(KV events, prefix-cache stats, copy-on-write copies), the connector's checks and the whole pool
(`fuzz.blockpool.pool_state.pool_problems`), each read in one call of what changed since the op
before. A mixin of the lock step: it reads `model`, `trace`, `requests`, `unread` and `view`."""

from __future__ import annotations

import itertools

from kvfuzz.fuzz.blockpool.pool_state import events_problems, pool_problems
from kvfuzz.fuzz.engine.lockstep import short
from kvfuzz.oracle.blockpool.events import replay
from kvfuzz.strategies.kvmanager.released import (COUNTS_COMMON_PREFIX, NO_COMPUTED_IDS,
                                                  NO_COPIES, NO_ESTIMATE, NO_RECORD)


class StateReads:
    def state(self, op) -> list[tuple[str, str]]:
        problems, rids = [], list(self.requests)
        # every request's tables in one read of what changed since the op before
        read = self.read_changed("block_tables", rids).get("tables") if rids else []
        if not isinstance(read, list):
            return [("block table", f"block_tables answered {short(read)}, not a list")]
        model = self.model  # (every table compared at once first: all agree, most ops)
        tables = model.tables  # (the model's own lists, compared, not copied)
        differ = read != [[table.get(rid, []) for table in tables] for rid in rids]
        for rid, tables in itertools.zip_longest(rids, read[:len(rids) + 1]) if differ else ():
            expected = model.block_ids(rid) if rid is not None else "(no request)"
            if tables != expected:
                problems.append(("block table", f"r{rid}: expected {short(expected)}, actual "
                                                f"{short(tables)}"))
                break
        request = self.requests.get(getattr(op, "rid", None))
        if request is not None:  # what the scheduler reads of the request the op moved
            problems += self._reads(op.rid, request)
        problems += self._observed() + self.connector_problems()
        view = self.view if self.trace.events and not self.trace.report else None
        # the pool in one read of what changed since the op before (`Lockstep.read_changed`)
        return problems + pool_problems(self.impl, self.model.pool, "state read", view,
                                        writable=False, lock=self)

    def _reads(self, rid: int, request) -> list[tuple[str, str]]:
        asked = self._scheduler_reads()
        if not asked:
            return []
        # one read of them all (one transcript record, not three)
        answers = self.read("scheduler_reads", rid, request.computed, list(asked))
        if not isinstance(answers, list) or len(answers) != len(asked):
            return [("scheduler reads", f"r{rid}: {len(asked)} answers expected, actual "
                                        f"{short(answers)}")]
        model, problems = self.model, []
        for method, actual in zip(asked, answers):
            if method == "estimate_cached_tokens":
                expected = model.estimate_cached_tokens(rid)
            elif method == "block_ids_for_computed_tokens":
                expected = model.block_ids_for_computed_tokens(
                    rid, _clipped_at(self.trace, request.computed))
            else:  # common_prefix_blocks
                expected = [0] * len(model.groups)
            if actual != expected:
                problems.append((method, f"r{rid}: expected {short(expected)}, actual "
                                         f"{short(actual)}"))
        return problems

    def _scheduler_reads(self) -> list[str]:
        """The scheduler's reads of a request the class has (`unread`: those it lacks), in
        their order; the same for every op of a trace, so worked out once for its `unread`."""
        unread, asked = self.__dict__.get("_asked_reads", (None, None))
        if unread is not self.unread:
            asked = [method for method, lacking in (
                ("estimate_cached_tokens", NO_ESTIMATE),
                ("block_ids_for_computed_tokens", NO_COMPUTED_IDS),
                ("common_prefix_blocks", COUNTS_COMMON_PREFIX)) if lacking not in self.unread]
            self.__dict__["_asked_reads"] = (self.unread, asked)
        return asked

    def _observed(self) -> list[tuple[str, str]]:
        """What the scheduler drains every step: the KV events and the prefix-cache stats, and,
        in a trace that observes either, its other calls of every step (`new_step_starts`;
        the pending copy-on-write copies, none without partial hits). Never in a live guard's
        trace: the engine's own consumers drain them."""
        problems, trace = [], self.trace
        if not (trace.events or trace.stats):
            return problems
        asked = (NO_COPIES not in self.unread, trace.events,
                 trace.stats and NO_RECORD not in self.unread)
        # one read of them all (one transcript record, not four)
        answers = self.read("observed", *asked)
        if not isinstance(answers, list) or len(answers) != sum(asked):
            return [("observed", f"new_step_starts and its drains: {sum(asked)} answers "
                                 f"expected, actual {short(answers)}")]
        answered = iter(answers)
        copies, published, actual = (next(answered) if on else None for on in asked)
        if asked[0] and copies != ([], []):
            problems.append(("copy-on-write", f"take_kv_cache_block_copies: expected no "
                                              f"copies (no partial hits), actual "
                                              f"{short(copies)}"))
        if trace.events:
            self.view = replay(self.view, published)
            problems += events_problems("the op", self.model.take_events(), published,
                                        self.count)
        if asked[2]:
            expected = self.model.make_prefix_cache_stats()
            if actual != expected:
                problems.append(("prefix cache stats", f"(requests, queries, hits, preempted "
                                                       f"requests, queries, hits, reset): "
                                                       f"expected {expected}, actual {actual}"))
        return problems


def _clipped_at(trace, computed: int) -> int:
    """The tokens vLLM 0.33's `get_block_ids_for_computed_tokens` keeps blocks for, in the
    manager's blocks: it clips by the spec's block size, which under DCP is a rank's share of
    the manager's block (`dcp` times smaller), so it keeps up to `dcp` times the blocks that
    cover `computed` (a block past them included; docs/upstream-vllm.md, "DCP"). The oracle
    follows the release's rule, which a fix would change."""
    return computed * trace.dcp if trace.dcp > 1 else computed
