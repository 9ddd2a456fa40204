"""Reference model of the paged allocator object (spec §4, released behaviour §10) in plain lists:
the free list, need_sort staging, free groups, and what every call returns or rejects.

Read beside ../shared/spec/paged-allocator.md §4.2-§4.10. Slots come from `oracle/paged/model.py`.

Misuse (what "as the spec says" means here). With debug checks on (upstream:
`SGLANG_DEBUG_MEMORY_POOL`), these calls are REJECTED: the call raises and nothing observable
changes (free list, staged pages, available size):
  - spec §4.5: `alloc(need_size)` with need_size not a multiple of the page size;
  - spec §0/§4.6-4.7: `last_loc` breaking the alignment invariant (extend and decode);
  - spec §4.8/§4.10: a double free, i.e. releasing a page that is already free or staged, or the
    same page twice in one `free_page_ids`/`free_segment` release (the spec's duplicate check);
  - spec §4.9: a `free_segment` that is not a row's tail (its every P-th slot misses a page one
    of its slots touches);
  - kvfuzz hardening, beyond the spec (which only says page 0 is reserved): releasing page 0 or a
    page outside 1..num_pages. Upstream has no such check: its adapter declares so
    (strategies/allocator/profile.py), and gets no such misuse.
A `free_segment` whose start is not page-aligned is rejected in every mode (upstream asserts),
and so is a nested `free_group_begin`; a `free_group_end` without a begin does nothing.
With debug checks off nothing else is validated; misuse traces therefore run with debug on.

`checks_after_release` models a class that declares so (upstream `PagedTokenToKVPoolAllocator`):
its debug check looks for a page twice on the whole free list only after a release has put the
pages there. A double free (or a free page released again) is then released AND raises; the
free list holds the caller's corruption from then on (`corrupted`), so nothing after it is
judged.

`token=True` models upstream `TokenToKVPoolAllocator` (page size 1, its released source is the
contract): `free` appends what it is given to the free list (or stages it), in the order given,
with no dedup; `free_page_ids` and `free_segment` are `free`; a free group releases its chunks
once, in order; there are no debug checks.
"""

from __future__ import annotations

from kvfuzz.oracle.paged.model import ceil_pages, decode_slots, extend_slots


class Rejected(Exception):
    """The spec rejects this call; the message says why, with the numbers."""


class AllocatorModel:
    def __init__(self, size: int, page_size: int, need_sort: bool, debug: bool = False,
                 token: bool = False, checks_after_release: bool = False):
        self.page_size, self.need_sort, self.debug = page_size, need_sort, debug and not token
        self.token = token
        self.after = checks_after_release and self.debug
        self.corrupted = False  # a double free was released, then reported (`after` only)
        self.num_pages = size // page_size
        self.clear()

    def clear(self) -> None:
        self.free = list(range(1, self.num_pages + 1))  # head first
        self.staged: list[int] = []
        self.group: list[list[int]] | None = None       # slots passed to free() inside a group
        self.group_page_ids: list[list[int]] = []       # pages from free_segment/free_page_ids
        self.fault_pending = False  # a double free waits in the open group (`after` only)

    def available_size(self) -> int:
        return (len(self.free) + len(self.staged)) * self.page_size

    def pending_pages(self) -> list[int]:
        """Pages freed inside the open group, not yet released."""
        slots = [slot for chunk in self.group or [] for slot in chunk]
        return sorted({s // self.page_size for s in slots}) + \
            [page for chunk in self.group_page_ids for page in chunk]

    def merge(self) -> None:
        if self.staged:
            self.free, self.staged = sorted(self.free + self.staged), []

    def alloc(self, need_size: int) -> list[int] | None:
        """§4.5: whole pages from the head (need_size floors to pages), or None."""
        num = need_size // self.page_size
        if self.debug and need_size % self.page_size:
            raise Rejected(f"alloc({need_size}) is not a multiple of page size {self.page_size}")
        if num > len(self.free):
            self.merge()
        if num > len(self.free):
            return None
        pages, self.free = self.free[:num], self.free[num:]
        return [page * self.page_size + offset for page in pages for offset in range(self.page_size)]

    def alloc_extend(self, prefix_lens, seq_lens, last_loc, num_new_pages=None):
        """§4.6 and §10: merge when the cheap bound exceeds the head, None when short."""
        P = self.page_size
        if self.debug:
            bad = [i for i, (q, ll) in enumerate(zip(prefix_lens, last_loc)) if (ll + 1) % P != q % P]
            if bad:
                i = bad[0]
                raise Rejected(f"extend alignment: request {i} has (last_loc {last_loc[i]} + 1) % "
                               f"{P} != prefix_len {prefix_lens[i]} % {P}")
        extend_num_tokens = sum(s - q for q, s in zip(prefix_lens, seq_lens))
        if extend_num_tokens // P + len(prefix_lens) + 1 > len(self.free):
            self.merge()
        if num_new_pages is None:
            num_new_pages = sum(ceil_pages(s, P) - ceil_pages(q, P)
                                for q, s in zip(prefix_lens, seq_lens))
        if num_new_pages > len(self.free):
            return None
        expected = extend_slots(prefix_lens, seq_lens, last_loc, self.free, P)
        self.free = self.free[num_new_pages:]
        return expected.slots

    def alloc_decode(self, seq_lens, last_loc):
        """§4.7: one token each; a token at a page start takes the next head page."""
        P = self.page_size
        if self.debug:
            bad = [i for i, (s, ll) in enumerate(zip(seq_lens, last_loc)) if (ll + 2) % P != s % P]
            if bad:
                i = bad[0]
                raise Rejected(f"decode alignment: request {i} has (last_loc {last_loc[i]} + 2) % "
                               f"{P} != seq_len {seq_lens[i]} % {P}")
        if len(seq_lens) > len(self.free):
            self.merge()
        num_new_pages = sum((s - 1) % P == 0 for s in seq_lens)
        if num_new_pages > len(self.free):
            return None
        expected = decode_slots(seq_lens, last_loc, self.free, P)
        self.free = self.free[num_new_pages:]
        return expected.slots

    def free_slots(self, slots: list[int]) -> None:
        """§4.8 `free`: every page touched is released whole, deduplicated within the call."""
        if not slots:
            return
        if self.group is not None:
            self._note_pending_double({s // self.page_size for s in slots}, chunk=False)
            self.group.append(list(slots))
            return
        self._release(list(slots) if self.token else sorted({s // self.page_size for s in slots}))

    def free_segment(self, slots: list[int], start_pos: int) -> None:
        """§4.9: one slot per page (`slots[::P]`), no dedup."""
        if not slots:
            return
        if start_pos % self.page_size:
            raise Rejected(f"free_segment start {start_pos} is not a multiple of {self.page_size}")
        strided = [s // self.page_size for s in slots[::self.page_size]]
        if self.debug and sorted(strided) != sorted({s // self.page_size for s in slots}):
            raise Rejected(f"free_segment of {len(slots)} slots is not a row's tail: its every "
                           f"{self.page_size}th slot touches pages {sorted(strided)[:8]}, its "
                           f"slots pages {sorted({s // self.page_size for s in slots})[:8]}")
        self.free_page_ids(strided)

    def free_segments(self, segments) -> None:
        """Several `(slots, start_pos)` segments of one row, each a `free_segment`, empty ones
        skipped; a segment that shares a page with the one before it is rejected when it is
        reached (upstream asserts as it goes: the segments before it stay freed)."""
        for slots, start_pos in page_disjoint(segments, self.page_size):
            self.free_segment(slots, start_pos)

    def free_page_ids(self, pages: list[int]) -> None:
        if self.token:
            return self.free_slots(pages)  # page ids are slots
        if not pages:
            return
        if self.group is not None:
            self._note_pending_double(pages, chunk=True)
            self.group_page_ids.append(list(pages))
            return
        self._release(list(pages))

    def _note_pending_double(self, pages, chunk: bool) -> None:
        """`checks_after_release`: a page staged in the group that is free already, or twice
        among the page-id chunks (free() chunks are deduplicated at the end), is a double free
        its end will report: the state until then is the caller's fault (`fault_pending`)."""
        if not self.after:
            return
        staged_here = {page for part in self.group_page_ids for page in part}
        if chunk:  # a page-ids chunk meets the free() chunks' pages too
            staged_here |= {s // self.page_size for part in self.group or [] for s in part}
        twice = chunk and len(set(pages)) < len(pages)
        if twice or set(pages) & (set(self.free) | set(self.staged) | staged_here):
            self.fault_pending = True

    def group_begin(self) -> None:
        if self.group is not None:
            raise Rejected("free_group_begin inside an open free group (groups cannot nest)")
        self.group, self.group_page_ids = [], []

    def group_end(self) -> None:
        """§4.10: the free() part once, deduplicated, then the page-id part, as upstream orders it."""
        pending, self.group = self.group or [], None
        ids, self.group_page_ids = self.group_page_ids, []
        self.fault_pending = False  # released now: reported (corrupted) or not there after all
        if self.token:  # one free() of every chunk, in order
            self._release([slot for chunk in pending for slot in chunk], check=False)
            return
        first = sorted({s // self.page_size for chunk in pending for s in chunk})
        second = [page for chunk in ids for page in chunk]
        if not self.after:
            self._check(first + second)
        for part in (first, second):  # checked after each part where the check comes after
            if part:
                self._release(part, check=self.after)

    def _release(self, pages: list[int], check: bool = True) -> None:
        if check and not self.after:
            self._check(pages)
        if not pages:
            return
        if self.need_sort:
            self.staged += pages
        elif self.token:
            self.free = self.free + pages  # appended: reused last
        else:
            self.free = pages + self.free  # prepended: freed pages are reused first
        if check and self.after:
            self._check_free_list()

    def _check_free_list(self) -> None:
        """`checks_after_release`: a page twice on the free list (staged included) raises."""
        seen, twice = set(), []
        for page in self.free + self.staged:
            if page in seen:
                twice.append(page)
            seen.add(page)
        if twice:
            self.corrupted = True
            raise Rejected(f"pages {sorted(twice)[:8]} twice on the free list after the release "
                           f"(the duplicate check runs after it)")

    def _check(self, pages: list[int]) -> None:
        if self.debug:
            problems = release_problems(pages, self.free, self.staged, self.num_pages)
            if problems:
                raise Rejected("; ".join(problems))


def release_problems(pages, free, staged, num_pages: int) -> list[str]:
    """Why releasing `pages` would corrupt the free list (empty: it would not)."""
    problems, seen = [], set()
    available = set(free) | set(staged)
    for page in pages:
        if page == 0:
            problems.append("page 0 is the reserved padding page")
        elif not 1 <= page <= num_pages:
            problems.append(f"page {page} is outside the pool 1..{num_pages}")
        elif page in seen:
            problems.append(f"double free: page {page} released twice in one call")
        elif page in available:
            problems.append(f"double free: page {page} is already free")
        seen.add(page)
    return problems


def page_disjoint(segments, page_size: int):
    """The non-empty `(slots, start_pos)` segments of one row, in order; one that shares a page
    with the segment before it is rejected when it is reached (upstream asserts as it goes)."""
    previous_end = None
    for slots, start_pos in segments:
        if not slots:
            continue
        if previous_end is not None and start_pos // page_size <= (previous_end - 1) // page_size:
            raise Rejected(f"segment at {start_pos} shares a page with the one ending at "
                           f"{previous_end}")
        previous_end = start_pos + len(slots)
        yield list(slots), start_pos
