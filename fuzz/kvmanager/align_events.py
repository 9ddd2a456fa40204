"""KV events and the prefix-cache stats beside a Mamba "align" group (the reduced mode of
`align.py`, a trace with `events` or `stats`). The mode asks no oracle what to cache, so what is
judged is what a consumer can know exactly:

- events: every event the manager published so far, replayed (`Stored` adds its hashes,
  `Removed` takes one away, `AllBlocksCleared` empties it), holds exactly the (hash, group)
  entries the pool's cache map holds after every op, each as many times as blocks hold it (an
  entry announced twice, one never announced, one gone unannounced all show); each `Removed`
  names an entry announced and not removed since; `AllBlocksCleared` only from a reset that
  succeeded, and one from each; each `Stored` is the op's request's, as vLLM 0.33.0's
  `BlockPool` builds it (`stored_problem`): whole blocks (`cache_full_blocks`: the request's
  block hashes of a run from a block whose parent it names, the Mamba group's nulls left out,
  the run's tokens, `block_size` the group's) or a partial entry (`cache_partial_block`: one
  hash unit's hash, the unit before it as parent, its tokens, `block_size` the hash block's),
  its group's kind, per block its lookahead tokens and no extra keys;
- stats: `make_prefix_cache_stats()` after every op equal to the admissions recorded since the
  last (requests, tokens queried, tokens hit; apart for preempted requests; a reset since), the
  hits being those the mode judges exactly (`align_hits.py`).

A mixin of `AlignLockstep`: `align.py` calls `start_events` (build), `align_record` (an
admission made), `take_observed` and `observed_problems` (every op's state read)."""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.engine.lockstep import Call, short
from kvfuzz.fuzz.kvmanager import align_order, align_reported
from kvfuzz.fuzz.kvmanager.align_recorded import EXTERNAL_RECORDED, AlignRecorded
from kvfuzz.fuzz.kvmanager.align_reported import AlignReported
from kvfuzz.oracle.blockpool.events import event_violations
from kvfuzz.oracle.kvmanager.stats import PrefixStats
from kvfuzz.strategies.blockpool.events import Cleared, Removed, Stored
from kvfuzz.strategies.kvmanager.released import NO_RECORD

PUBLISHED = "align: KV events published"
PARTIAL = "align: partial entry stored"
MAMBA_STORED = "align: Mamba state stored"
REMOVED = "align: entry removed"
CLEARED = "align: all blocks cleared"
RECORDED = "align: stats recorded"
OWN = (PUBLISHED, PARTIAL, MAMBA_STORED, REMOVED, CLEARED, RECORDED)  # (any observing trace)
EVENTS = (*OWN, EXTERNAL_RECORDED, *align_reported.EVENTS, *align_reported.CONNECTOR_EVENTS)
KINDS = ("full_attention", "mamba")  # a Stored's group kind, by the trace's group id


class AlignEvents(AlignReported, AlignRecorded):
    """(First of `AlignLockstep`'s bases: its mixins wrap the lock step's `_run` and the
    connector's admissions.)"""

    def start_events(self, trace) -> None:
        self.reported_due = []  # hits reported, their events due (`align_reported.py`)
        self.event_view: Counter = Counter()  # what a consumer of the events believes cached
        self.align_stats = PrefixStats() if trace.stats else None

    def align_record(self, rid: int, request, hit):
        """What the scheduler records after an admission that was made (`hit` None: not an
        admission): nothing for a request that skips the cache."""
        if hit is None or self.align_stats is None or NO_RECORD in self.unread:
            return
        if not request.skip and self.trace.caching:
            self.align_stats.record(len(request.tokens), hit, request.preempted)
        self.count(RECORDED)
        yield Call("", "record_stats", (rid, hit), oracle=None)

    def take_observed(self) -> tuple:
        """The events and stats the scheduler drains every step (those the trace observes), and
        whether this op reset the cache (read before the pool's checks forget it)."""
        trace = self.trace
        events = self.read("take_events") if trace.events else None
        stats = self.read("stats") if self.align_stats is not None and \
            NO_RECORD not in self.unread else None
        return events, stats, self.reset_done

    def observed_problems(self, observed, rid) -> list[tuple[str, str]]:
        """The events against the pool's cache map as the state read left it (`self.cache`,
        by the trace's group ids) and the stats against the admissions recorded."""
        events, stats, reset = observed
        problems = []
        if self.trace.events:
            problems += self._events_problems(events, reset, self.requests.get(rid))
        if stats is not None or (self.align_stats is not None and NO_RECORD not in self.unread):
            if reset:
                self.align_stats.reset = True
            expected, self.align_stats = self.align_stats.as_tuple(), PrefixStats()
            if stats != expected:
                problems.append(("prefix cache stats", f"(requests, queries, hits, preempted "
                                                       f"requests, queries, hits, reset): "
                                                       f"expected {expected}, actual "
                                                       f"{short(stats)}"))
        return problems

    def _events_problems(self, events, reset: bool, request) -> list[tuple[str, str]]:
        if not isinstance(events, list):
            self.reported_due = []
            return [("KV events", f"take_events answered {short(events)}, not a list")]
        if events:
            self.count(PUBLISHED)
        ids, view = align_order.order(self.trace), self.event_view
        # a hit reported: its events first, re-announcements left out of the replay
        events, wrong = self.peel_reported(events, ids)
        if wrong:
            return wrong
        cleared = 0
        for index, event in enumerate(events):
            at = f"event {index} of {len(events)}"
            if isinstance(event, Cleared):
                cleared += 1
                self.count(CLEARED)
                view = Counter()
                continue
            if not isinstance(event, (Stored, Removed)):
                return [("KV events", f"{at}: not a Stored, Removed or Cleared: "
                                      f"{short(event)}")]
            group = ids.get(event.group, event.group) if ids else event.group
            if isinstance(event, Removed):
                self.count(REMOVED)
                gone = [(h, group) for h in event.hashes if view[(h, group)] <= 0]
                if gone:
                    return [("KV events", f"{at}: Removed of hash {gone[0][0]} (group "
                                          f"{group}), which no Stored announced since it was "
                                          f"last removed")]
                view.subtract((h, group) for h in event.hashes)
                continue
            wrong = stored_problem(event, group, request, self.trace)
            if wrong:
                return [("KV events", f"{at}: {wrong}: {short(event, 300)}")]
            if event.block_size != self.trace.block_size or len(event.tokens) < \
                    self.trace.block_size:
                self.count(PARTIAL)
            if group == 1 and event.hashes:
                self.count(MAMBA_STORED)
            view.update((h, group) for h in event.hashes)
        self.event_view = view = +view
        if cleared != int(reset):
            return [("KV events", f"{cleared} AllBlocksCleared published by an op that "
                                  f"{'reset' if reset else 'did not reset'} the cache")]
        wrong = event_violations(view, self.cache if isinstance(self.cache, dict) else {})
        return [("KV events", f"after the op's {len(events)} events: {wrong[0]}")] if wrong \
            else []


def stored_problem(event: Stored, group, request, trace) -> str | None:
    """What is wrong with a `Stored` of `request`'s (None: nothing), as vLLM 0.33.0's
    `cache_full_blocks` or `cache_partial_block` builds it."""
    if request is None:
        return "a Stored from an op of no live request"
    if group not in (0, 1):
        return f"group {group}: expected 0 (full attention) or 1 (Mamba)"
    if (event.kind, event.window) != (KINDS[group], None):
        return f"group {group}'s kind: expected {KINDS[group]!r}, no window"
    size, hashed, ahead = trace.block_size, trace.hash_size, trace.hash_lookahead
    units, tokens = request.hashes(hashed, ahead), request.tokens
    if event.block_size == size:  # whole blocks (or a partial entry of a whole hash block)
        step = size // hashed
        blocks = units[step - 1::step]  # the request's hash of each whole block
        start = 0 if event.parent is None else \
            blocks.index(event.parent) + 1 if event.parent in blocks else None
        if start is None:
            return "its parent is none of the request's block hashes"
        count, left = divmod(len(event.tokens), size)
        run = blocks[start:start + count]
        if left or not count or len(run) < count:
            return f"{len(event.tokens)} tokens from block {start}: expected whole blocks " \
                   f"the request has hashes of"
        at = _subsequence(event.hashes, run)
        if at is None or (group == 0 and len(at) != count):
            return f"its hashes: expected the request's hashes of blocks {start} to " \
                   f"{start + count - 1}{'' if group == 0 else ', nulls left out'}"
        ends = [(start + i + 1) * size for i in at]
        first, last = start * size, (start + count) * size
    elif event.block_size == hashed:  # a partial entry: one hash unit
        if len(event.hashes) != 1 or event.hashes[0] not in units:
            return "a partial entry: expected one of the request's hash unit's hashes"
        unit = units.index(event.hashes[0])
        if event.parent != (units[unit - 1] if unit else None):
            return f"a partial entry of unit {unit}: expected the unit before as its parent"
        first, last = unit * hashed, (unit + 1) * hashed
        ends = [last]
    else:
        return f"block size {event.block_size}: expected {size} (whole blocks) or {hashed} " \
               f"(a partial entry)"
    if event.tokens != tuple(tokens[first:last]):
        return f"its tokens: expected the request's tokens from {first}"
    if not request.keys and event.extra_keys != (tuple(None for _ in ends) or None):
        return "its extra keys: expected one None per block (the request has none)"
    lookahead = tuple(tuple(tokens[end:end + ahead]) for end in ends) if ahead else None
    if event.lookahead != lookahead:
        return f"its lookahead tokens: expected {short(lookahead)}"
    return None


def _subsequence(hashes, run) -> list[int] | None:
    """The indices in `run` of `hashes` in order (None: they are not a subsequence of it)."""
    at, i = [], 0
    for digest in hashes:
        while i < len(run) and run[i] != digest:
            i += 1
        if i == len(run):
            return None
        at.append(i)
        i += 1
    return at
