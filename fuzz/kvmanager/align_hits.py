"""The reduced mode's checks of an admission's hit (`align.py`, for a Mamba group in "align"
mode with prefix caching): its shape (at most `num_tokens - 1` tokens, a multiple of the hash
block, cdiv(hit, b) blocks per group, the Mamba group's null but the last), its keys (full
attention's whole blocks each cached under the request's hash of that block, the Mamba state
under its hash of the hit), and since 2026-12-05 its length: exactly what the pool held before
the lookup gives (`oracle/kvmanager/align_hit.py`, vLLM's hybrid fixed point over the two
groups' fine-grained lookups). And the lookup a scheduler with a KV connector makes first, and a
block's cache entries. A mixin of `AlignLockstep`: it reads the cache map the last state read
kept (`AlignPoolChecks`, `self.cache`)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, crash_problems, short
from kvfuzz.fuzz.kvmanager import align_connector
from kvfuzz.fuzz.kvmanager.connector_cap import (ALIGN_CAPPED, ALIGN_CUT, cap_text, capped_args,
                                                 lookup_cap)
from kvfuzz.oracle.kvmanager import align_hit, mamba_align
from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.strategies.kvmanager.released import NO_CONNECTOR


class AlignHitChecks:
    def _hit_problems(self, request, actual, raised) -> list[tuple[str, str]]:
        if raised is not None:
            return crash_problems(raised)
        try:
            blocks, hit, given = actual
            full, mamba = blocks
        except (TypeError, ValueError):
            return [("prefix hit", f"expected (two groups' blocks, hit tokens, boundary), "
                                   f"actual {short(actual)}")]
        trace, tokens = self.trace, len(request.tokens)
        size, hashed = trace.block_size, trace.hash_size
        if request.skip and hit:
            return [("prefix hit", f"a request that skips the cache hit {hit} tokens")]
        if not 0 <= hit <= tokens - 1 or hit % hashed:
            return [("prefix hit", f"{hit} tokens of a {tokens}-token prompt: expected a "
                                   f"multiple of {hashed} below {tokens}")]
        count = cdiv(hit, size)
        if len(full) != count or len(mamba) != count:
            return [("prefix hit", f"{hit} tokens in blocks of {size}: expected {count} blocks "
                                   f"per group, actual {short(blocks)}")]
        if hit and (not mamba[-1] or any(mamba[:-1])):
            return [("prefix hit", f"the Mamba group's blocks: expected nulls then its state "
                                   f"block, actual {short(mamba)}")]
        units = request.hashes(hashed, self.trace.hash_lookahead)
        for index, block in enumerate(full[:hit // size]):
            if (units[(index + 1) * size // hashed - 1], 0) not in self._entries(block):
                return [("prefix hit", f"full attention's block {index}, block {block}, is not "
                                       f"cached under the request's hash of it")]
        if hit and mamba_align.hit_key(units, hit, hashed) not in self._entries(mamba[-1]):
            return [("prefix hit", f"the Mamba group's block {mamba[-1]} is not cached under "
                                   f"the request's hash of its first {hit} tokens (the state "
                                   f"a hit resumes from)")]
        return self._hit_length_problems(units, tokens, hit, given, request.skip, request.cap)

    def _hit_length_problems(self, units, tokens: int, hit: int, given: int, skip: bool,
                             cap: int = -1):
        """The hit's length against what the pool held before the lookup
        (`oracle/kvmanager/align_hit.py`: full attention's hit, then the Mamba group's latest
        cached state no deeper), under the caller's `cap` (-1: none)."""
        trace = self.trace
        if skip:  # no lookup: a hit was refused above
            return [] if given == 0 else [("prefix hit", f"a request that skips the cache: "
                                                         f"boundary {given}, expected 0")]
        size, hashed = trace.block_size, trace.hash_size
        cached = self.cache if trace.caching else {}  # caching off: no lookup, nothing found
        full, expected = align_hit.hybrid_hits(units, tokens, size, hashed, cached, trace.eagle,
                                               cap)
        if cap >= 0:
            self.count(ALIGN_CAPPED)
            if (full, expected) != align_hit.hybrid_hits(units, tokens, size, hashed, cached,
                                                         trace.eagle):
                self.count(ALIGN_CUT)
        if hit == expected:
            edge = align_connector.boundary(full, hit)
            return [] if given == edge else [("prefix hit", (
                f"a hit of {hit} tokens where full attention's own covers {full}: expected a "
                f"shared-prefix boundary of {edge}, actual {given}"))]
        state = f"the latest Mamba state cached at most that deep is at {expected}" \
            if expected else "no Mamba state is cached at most that deep"
        return [("prefix hit", f"expected {expected} tokens, actual {hit}: full attention's "
                               f"entries cover {full} of the request's {tokens} tokens (blocks "
                               f"of {size}, hashed per {hashed}, the last token never a hit), "
                               f"{state}")]

    def lookup_problems(self, rid: int, actual, max_hit: int = -1) -> list[tuple[str, str]]:
        """A live scheduler's lookup, checked when it is made (`fuzz/kvmanager/guard.py`: it
        may allocate nothing after it), as an admission's hit is: a Mamba "align" manager
        under vLLM's own scheduler (`guard_mamba.py`)."""
        if not self.align:
            return super().lookup_problems(rid, actual, max_hit)
        request = self.requests[rid]
        request.cap = lookup_cap(max_hit, len(request.tokens))  # (the engine's, -1: none)
        problems = self._hit_problems(request, actual, None)
        if problems:
            self.log.append(f"get_computed_blocks(r{rid}{cap_text(request.cap)}) -> "
                            f"{short(actual, 60)}")
        return problems

    def _connector_lookup(self, rid, request, max_hit: int = -1):
        """The lookup a scheduler with a KV connector makes first (`align_connector.py`); it
        adopts nothing: the admission takes `get_computed_blocks`' hit, as that scheduler does
        when its connector holds none of the tokens. None under lookahead hashing: vLLM keeps
        the legacy hashes with a KV connector, so a scheduler with lookahead hashes has none.
        `max_hit`: the admission's cap (`Schedule.max_hit`), both lookups taking it."""
        request.cap = lookup_cap(max_hit, len(request.tokens))
        if NO_CONNECTOR in self.unread or self.looked_up or self.trace.hash_lookahead:
            self.looked_up = False  # (made by the connector's admission: `align_external`)
            return
        trace = self.trace
        expected = align_connector.request_expectation(trace, self.cache, request,
                                                       cap=request.cap)
        self.count(expected[0])
        self.count_capped(request, expected)
        if expected[0] == align_connector.AGREED and expected[1] > 256:
            self.count(align_connector.AGREED_PAST_256)
        yield Call(f"get_computed_blocks_for_connector(r{rid}{cap_text(request.cap)})",
                   "connector_lookup", capped_args(rid, request.cap), oracle=None,
                   compare=lambda e, r, actual, raised:
                   align_connector.lookup_problems(expected, actual, raised))

    def count_capped(self, request, expected) -> None:
        """A connector lookup's edge classes of the caller's cap: capped, its answer changed."""
        if request.cap < 0:
            return
        self.count(ALIGN_CAPPED)
        trace = self.trace
        # (the answer, not the path to it)
        if expected[1:] != align_connector.request_expectation(trace, self.cache, request)[1:]:
            self.count(ALIGN_CUT)

    def _entries(self, block: int) -> list:
        """A block's cache entries (hash, group) as the last state read showed them."""
        entries = self.keys[block] if 0 < block < self.trace.blocks else None
        return entries if isinstance(entries, list) else [entries]
