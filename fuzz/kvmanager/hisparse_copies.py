"""The HiSparse reduced mode's GPU copies (`hisparse_pins.py`): which pages of a host hit come back
resident. From vLLM 0.33.0's `HiSparseCoordinator`: once a page is published on the host, the
resident block it was written back from is recorded as that hash's GPU copy (`_record_copies`,
over the request's pages from the last recorded one to its published prefix, skipping a page
with a transfer in flight; and an import's restored last page when its restore completes,
`_record_copy`); a new record of a hash replaces the old; a copy goes when the pool hands its
block out again (`_on_block_reused`) or the cache is reset. A new request's host hit adopts, at
its first step, the copy of each hit page that has one (`_adopt_copies`): its residency row
shows that block, pinned ("adoption"); a page without one stays read from the host (0)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import short
from kvfuzz.fuzz.kvmanager.hisparse_checks import INDEXER

TWO_COPIES = "one hash's GPU copy recorded by two requests in one report"


class GpuCopies:
    """Mixed into `hisparse_pins.ResidentPins`: the coordinator's `copies` (host hash -> its
    block). Where two requests record one hash in one report, the release's order is a set's
    (`completed_request_ids`, by string hash: it changes from process to process), so the judge
    keeps both blocks as candidates, and whether a candidate handed out took the copy with it
    (`maybe_gone`), until an adoption shows which."""

    def start_copies(self) -> None:
        self.copies: dict[str, set] = {}
        self.maybe_gone: set[str] = set()
        self.copy_of: dict[int, str] = {}  # block -> the hash it was last recorded for

    def handed_out(self, groups) -> None:
        """The device blocks an allocation handed out (`groups`: its new blocks per group, more
        lists after them if need be): each one's copy goes (`_on_block_reused`)."""
        for group in range(INDEXER, len(groups or ())):
            for block in groups[group]:
                key = self.copy_of.pop(block, None)
                blocks = self.copies.get(key, set())
                if block in blocks:
                    if len(blocks) == 1 and key not in self.maybe_gone:
                        self._drop(key)
                    else:  # the copy was this block, or another candidate
                        blocks.discard(block)
                        self.maybe_gone.add(key)
                        if not blocks:
                            self._drop(key)

    def _drop(self, key) -> None:
        for block in self.copies.pop(key, ()):
            if self.copy_of.get(block) == key:
                del self.copy_of[block]
        self.maybe_gone.discard(key)

    def _record(self, key, blocks) -> None:
        """`_record_copy` (by one request, or by several in one report: `blocks`)."""
        self._drop(key)
        self.copies[key] = set(blocks)
        for block in blocks:
            self.copy_of[block] = key

    @staticmethod
    def window(state, pages: int) -> list[int]:
        """The pages `_record_copies` considers now: from the last recorded one to the published
        prefix (the last `cache_blocks`' `pages`, within the pages written back from the
        start), less those with a transfer in flight (never considered again)."""
        ready = 0
        while ready in state.valid:
            ready += 1
        end = min(pages, ready)
        chosen = [p for p in range(state.recorded, end) if p not in state.pending]
        state.recorded = max(state.recorded, end)
        return chosen

    @staticmethod
    def resolve(source, row, keys, pages) -> list:
        """(hash, block) of each of `pages` with a published host block and a resident one."""
        found = []
        for page in pages:
            host = source[page] if page < len(source) else 0
            if 0 < host < len(keys) and keys[host] is not None and page < len(row) and \
                    row[page]:
                found.append((repr(keys[host]), row[page]))
        return found

    def record(self, *records) -> None:
        """The records of one request, or of several in one report (in any order)."""
        by_key: dict[str, list] = {}
        for found in records:
            for key, block in found:
                by_key.setdefault(key, []).append(block)
        for key, blocks in by_key.items():
            if len(records) > 1 and len(set(blocks)) > 1:
                self.count(TWO_COPIES)
            self._record(key, blocks[-1:] if len(records) == 1 else blocks)

    def adoption_problems(self, rid, state, source, row, keys) -> list[tuple[str, str]]:
        """At a host hit's first step: each hit page resident exactly when its hash has a copy,
        on that copy's block (what it shows settles a candidate)."""
        pages, state.to_adopt = state.to_adopt, 0
        wrong = []
        for page, host in enumerate(source[:pages]):
            key = repr(keys[host]) if 0 < host < len(keys) and keys[host] is not None else None
            allowed = set(self.copies.get(key, ()))
            if key not in self.copies or key in self.maybe_gone:
                allowed.add(0)
            actual = row[page] if page < len(row) else 0
            if actual not in allowed:
                wrong.append((page, sorted(allowed), actual))
            elif actual:
                self._record(key, [actual])
            elif key in self.copies:
                self._drop(key)
        if not wrong:
            return []
        return [("adoption", f"r{rid}: a host hit of {pages} pages (host blocks "
                             f"{short(source[:pages])}): (page, the GPU copies recorded for its "
                             f"hash, 0: none, adopted) {short(wrong)}")]
