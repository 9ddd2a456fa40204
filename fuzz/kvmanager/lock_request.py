"""A request as the kvmanager lock step tracks it (`lockstep.py`): its tokens, computed count and
status, its steps in flight (`async_ops.Flights`), its hashes extended as tokens come."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.async_ops import Flights
from kvfuzz.oracle.kvmanager.extra_keys import block_extra_keys
from kvfuzz.strategies.kvmanager import trace as kvmanager
from kvfuzz.strategies.kvmanager.hashing import chain_from

WAITING, RUNNING = "waiting", "running"


class _Request(Flights):
    def __init__(self, tokens, skip: bool = False, keys=kvmanager.NO_KEYS):
        self.tokens, self.computed, self.status = list(tokens), 0, WAITING
        self.keys = keys  # its extra hash keys (LoRA, cache salt, images)
        self.prompt, self.skip = len(self.tokens), skip  # skip: it never reads the cache
        self.boundary = 0  # the shared-prefix boundary of its last lookup (the scheduler keeps it)
        self.cap = -1  # the caller's cap on its admission's lookups (-1: none; `connector_cap`)
        self.preempted = False  # preempted before (its admissions count as such in the stats)
        # its last allocation's tokens, in flight at the next (async); a pipeline's last few
        self.flights: list[int] = []
        # the tokens of the steps its last allocation took out of `flights`, whose output the
        # engine processes after it: 0 once an output is `processed` (`flight_finish.py`)
        self.older = 0
        # a connector admission's local hit, and each group's first block past it
        self.hit, self.held = 0, []
        # a synchronous load's (local hit, end, computed tokens after its admission), until the
        # request moves on: a `loaded` failure then rewinds it
        self.sync_load = None
        # under asynchronous scheduling, the output placeholder its admission's step left
        # unresolved when that step's output reported a failed block of its synchronous load
        # (vLLM skips the output): the scheduler schedules that position past its tokens once
        self.ghost = 0
        self.owed = 0  # and the placeholder of the step then in flight, until its `sample`
        # streaming input (`streaming.py`): stopped and waiting for an update; streamed since
        # its last allocation
        self.paused = self.streamed = False
        self.refused = None  # its last allocation refused: the preemptions made before it
        # under lookahead hashing: stopped resumable since its last lookup, its hashes perhaps
        # covering a discarded token until its next lookup makes them again (`streaming.py`)
        self.rehash = False
        self._hashes: list[int] = []

    def hashes(self, block_size: int, lookahead: int = 0) -> list[int]:
        """The block hashes of every full block so far, extended as tokens come (as vLLM's
        request does): rehashing every token on every step is quadratic in a long request.
        With `lookahead` (lookahead hashing) a block is hashed once that many tokens follow it."""
        done, known = len(self._hashes) * block_size, len(self.tokens) - lookahead
        if known - done >= block_size:
            # The chain restarts from the last known hash: hash the new blocks only.
            full = (known // block_size) * block_size
            self._hashes += chain_from(self._hashes[-1] if self._hashes else None,
                                       self.tokens[done:full + lookahead], block_size, done,
                                       self._extra_keys if self.keys else None, lookahead)
        return self._hashes

    def _extra_keys(self, start: int, end: int):
        return block_extra_keys(self.keys, start, end)

    def drop_hashes_past(self, block_size: int) -> None:
        """The hashes of blocks no longer full dropped (a streaming stop's discarded token)."""
        del self._hashes[len(self.tokens) // block_size:]
