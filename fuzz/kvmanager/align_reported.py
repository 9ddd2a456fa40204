"""Hits reported beside a Mamba "align" group (a trace with `events` and `report`: requests ask
`kv_cache_report_mode` "full"), judged since 2026-12-07 in the reduced mode of `align.py`.

Read in vLLM 0.33.0 (`vllm/v1/core/`): `KVCacheManager.get_computed_blocks` calls the
coordinator's `emit_cached_block_events` for a hit of one token or more (events on, the request
asking "full"); for each group with blocks in the hit, in the manager's group order,
`BlockPool.emit_cached_block_events` appends one `BlockStored` as if the first n blocks were
cached from block 0: n the group's hit blocks (cdiv(hit, b) beside the Mamba group: its nulls
and, for a hit inside a block, the whole block's hash counted too), the request's hashes of
blocks 0 to n - 1 at the group's block size, parent None, the tokens of blocks 0 to n - 1,
`block_size` the group's, one extra key a block, its lookahead tokens. The pool is not touched.
`get_computed_blocks_for_connector` emits nothing of its own: only where it falls back to
`get_computed_blocks` (a Mamba state deeper than full attention's hit).

So after such a lookup the op's first events are those, each exactly as built here; they are
re-announcements of blocks reused, so the events' replay (`align_events.py`) leaves them out.
A lookup that raised announces nothing.

A finding (2026-12-07): a hit inside the prompt's last block, which the request has no
whole-block hash of (a hit of 10 tokens of an 11-token prompt in blocks of 4 hashed per 2),
makes `emit_cached_block_events` read past the request's hashes (`BlockHashListWithBlockSize`:
IndexError) before it appends anything: `get_computed_blocks` raises, and the scheduler with
it. The reduced mode holds the release to that (`RAISED`: the lookup raises there and nowhere
else; the trace goes on, the request still waiting); a fix diverges there.

A mixin of `AlignLockstep` (before the lock step's `_run`, which it extends)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import short
from kvfuzz.fuzz.kvmanager import align_connector, align_order
from kvfuzz.oracle.kvmanager import align_hit
from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.strategies.blockpool.events import Stored

REPORTED = "align: hit reported"
REPORTED_PARTIAL = "align: hit inside a block reported"
RAISED = "align: hit reported past the prompt's whole blocks (vLLM 0.33.0 raises)"
EVENTS = (REPORTED, REPORTED_PARTIAL, RAISED)
# the same at a KV connector's lookup where it falls back to `get_computed_blocks` (the "mamba
# connector" profile's reports, drawn since 2026-12-07)
CONNECTOR_REPORTED = "align: hit reported by a connector's lookup (its fallback)"
CONNECTOR_RAISED = "align: a connector's lookup raising there (vLLM 0.33.0)"
CONNECTOR_EVENTS = (CONNECTOR_REPORTED, CONNECTOR_RAISED)
LOOKUPS = ("get_computed_blocks", "connector_lookup")
KINDS = ("full_attention", "mamba")  # by the trace's group id (`align_events.KINDS`)


class AlignReported:
    reported_due: list = []  # the op's reported events still to come: (request, group, blocks)

    def _run(self, call):
        """A lookup's call, then what it reported (`get_computed_blocks`; the connector's
        lookup only where it falls back to it), or the release's IndexError (`RAISED`)."""
        if not getattr(self, "align", False) or call.method not in LOOKUPS or \
                not (self.trace.report and self.trace.events):
            return super()._run(call)
        rid = call.args[0]
        emits = call.method == "get_computed_blocks" or self._falls_back(rid)
        raises = emits and self._past_whole_blocks(self.requests.get(rid))
        result, problems, text = super()._run(call)
        if raises:
            crashed = result is None and any("IndexError" in line for _, line in problems)
            self.count(RAISED)
            if call.method == "connector_lookup":
                self.count(CONNECTOR_RAISED)
            return result, [] if crashed else problems + [("KV events", (
                f"a hit reported inside the prompt's last block, which the request has no "
                f"whole hash of: expected vLLM 0.33.0's IndexError "
                f"(`emit_cached_block_events`)"))], text
        if emits and result is not None and self._due(rid, result.actual) and \
                call.method == "connector_lookup":
            self.count(CONNECTOR_REPORTED)
        return result, problems, text

    def _past_whole_blocks(self, request) -> bool:
        """Whether the hit the lookup finds (the pool's map before it) ends in a block the
        request has no whole-block hash of: vLLM 0.33.0's `emit_cached_block_events` reads
        the hash of each of the hit's cdiv(hit, b) blocks at the block size
        (`BlockHashListWithBlockSize`), and that read raises IndexError there."""
        trace = self.trace
        if request is None or request.skip:
            return False
        units = request.hashes(trace.hash_size, trace.hash_lookahead)
        _, hit = align_hit.hybrid_hits(units, len(request.tokens), trace.block_size,
                                       trace.hash_size, self.cache, trace.eagle, request.cap)
        return cdiv(hit, trace.block_size) * (trace.block_size // trace.hash_size) > len(units)

    def _falls_back(self, rid) -> bool:
        """Whether the connector's lookup of `rid` goes to `get_computed_blocks`: a Mamba state
        deeper than full attention's hit, from the pool's map before it."""
        request, trace = self.requests.get(rid), self.trace
        if request is None:
            return False
        expected = align_connector.request_expectation(trace, self.cache, request,
                                                       cap=request.cap)
        return expected[0] == align_connector.DEEPER

    def _due(self, rid, actual) -> bool:
        """Whether the lookup reported its hit; its events due, if so."""
        request = self.requests.get(rid)
        try:
            blocks, hit = actual[0], actual[1]
        except (TypeError, IndexError):
            return False  # (the lookup's own check reports the answer's shape)
        if request is None or not hit or request.skip:
            return False
        self.count(REPORTED)
        if hit % self.trace.block_size:
            self.count(REPORTED_PARTIAL)
        ids = align_order.order(self.trace)
        for manager in range(len(blocks)):  # the manager's group order
            group = ids.get(manager, manager) if ids else manager
            if 0 <= group < len(blocks) and blocks[group]:
                self.reported_due = [*self.reported_due, (request, group, len(blocks[group]))]
        return True

    def peel_reported(self, events: list, ids) -> tuple[list, list[tuple[str, str]]]:
        """The op's events less the reported ones at their head, each checked; the problems."""
        due, self.reported_due = self.reported_due, []
        for index, (request, group, count) in enumerate(due):
            event = events[index] if index < len(events) else None
            wrong = reported_problem(event, ids, request, group, count, self.trace)
            if wrong:
                return events, [("KV events", f"event {index} of {len(events)}: a hit reported "
                                              f"({count} blocks of group {group}): {wrong}: "
                                              f"{short(event, 300)}")]
        return events[len(due):], []


def expected_stored(request, group: int, count: int, trace) -> Stored:
    """The `BlockStored` vLLM 0.33.0's `emit_cached_block_events` builds for `count` blocks of
    `group` (the trace's id) of `request`'s hit (the event's own group id set by the caller)."""
    size, hashed, ahead = trace.block_size, trace.hash_size, trace.hash_lookahead
    step = size // hashed
    hashes = request.hashes(hashed, ahead)[step - 1::step][:count]
    tokens = request.tokens
    ends = [(i + 1) * size for i in range(count)]
    lookahead = tuple(tuple(tokens[end:end + ahead]) for end in ends) if ahead else None
    return Stored(tuple(hashes), None, tuple(tokens[:count * size]), size, group,
                  tuple(None for _ in ends), lookahead, KINDS[group], None)


def reported_problem(event, ids, request, group: int, count: int, trace) -> str | None:
    if not isinstance(event, Stored):
        return "expected a Stored"
    actual = ids.get(event.group, event.group) if ids else event.group
    if actual != group:
        return f"expected group {group}'s (in the manager's order), actual group {actual}'s"
    expected = expected_stored(request, group, count, trace)
    fields = ("hashes", "parent", "tokens", "block_size", "kind", "window", "lookahead") + \
        (() if request.keys else ("extra_keys",))
    for field in fields:
        if getattr(event, field) != getattr(expected, field):
            return f"its {field}: expected {short(getattr(expected, field))}"
    return None
