"""What an allocator implementation declares it supports (`Implementation.preconditions`), and
what that means for its traces: the generator makes only traces it supports (`profile_for`),
and a trace from elsewhere that breaks one (a corpus file, a fuzzer input) is outside its
contract (`broken`), never a stopped trace or an excuse after the fact. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvfuzz.strategies.allocator.trace import (ALL_MISUSES, FREE_HOWS, SEGMENT_MISUSES, Finish,
                                               FreePages, FreeSegments, Misuse, Trace, Truncate)

# The preconditions, by name. Each is a fact about a released class (docs/upstream-sglang.md).
PAGE_SIZE_2_UP = "page size >= 2 (SGLang serves page size 1 with its token allocator)"
TOKEN_INTERFACE = ("token interface: page size 1, alloc(n) only, constructor (size, dtype, "
                   "device, kvcache, need_sort)")
NO_RELEASE_CHECKS = ("no checks on released pages: a double free, page 0 or a page past the "
                     "pool is not rejected")
KEEPS_PAGE_IDS = ("keeps the tensor given to free_page_ids (need_sort): the caller must not "
                  "reuse it")
CHECKS_AFTER_RELEASE = ("debug checks see a double free only after releasing it: the pages go "
                        "onto the free list, then the call raises (the trace ends there)")
# What an earlier release's class does not have (read from the class: `impl/allocator`'s
# `released_api`): its requests are released by the calls it has.
NO_PAGE_IDS = "no free_page_ids (SGLang before 0.5.20): pages are released by free or segment"
NO_SEGMENT = "no free_segment (an earlier SGLang release): pages are released by free"
RELEASE_MISUSES = ("double_free", "free_page0", "free_unallocated", "free_out_of_range")
# What a duplicate check over the whole free list sees once the pages are on it.
SEEN_AFTER_RELEASE = ("double_free", "free_unallocated")
PAGE_SIZES = (1, 1, 2, 4, 4, 8, 16)  # the default mix (weights by repetition)


@dataclass(frozen=True)
class Profile:
    """What the generator may use: page sizes, the interface, the kinds of misuse, the calls
    that release a request's pages."""

    page_sizes: tuple[int, ...] = PAGE_SIZES
    interface: str = "paged"
    misuses: tuple[str, ...] = ALL_MISUSES
    tags: tuple[str, ...] = ()  # appended to the generator's name: another stream of traces
    hows: tuple[str, ...] = FREE_HOWS


DEFAULT = Profile()


def profile_for(preconditions) -> Profile:
    page_sizes, interface, misuses, tags = PAGE_SIZES, "paged", ALL_MISUSES, []
    if PAGE_SIZE_2_UP in preconditions:
        page_sizes, tags = tuple(p for p in page_sizes if p >= 2), tags + ["P>=2"]
    if TOKEN_INTERFACE in preconditions:
        page_sizes, interface, tags = (1,), "token", tags + ["token"]
    if NO_RELEASE_CHECKS in preconditions or interface == "token":
        after = CHECKS_AFTER_RELEASE in preconditions and interface != "token"
        misuses = tuple(kind for kind in misuses if kind not in RELEASE_MISUSES
                        or (after and kind in SEEN_AFTER_RELEASE))
        tags += ["no-release-checks"] + (["checks-after-release"] if after else [])
    if interface == "token":  # no alloc_extend/alloc_decode (no last_loc to get wrong), alloc(n)
        # of any n, and free_segment is free (no page alignment to check)
        misuses = tuple(kind for kind in misuses if kind not in
                        ("bad_last_loc", "alloc_unaligned", "segment_gapped") + SEGMENT_MISUSES)
    hows = FREE_HOWS
    for missing, how, tag in ((NO_PAGE_IDS, "page_ids", "no-page-ids"),
                              (NO_SEGMENT, "segment", "no-segment")):
        if missing in preconditions:
            hows, tags = tuple(h for h in hows if h != how), tags + [tag]
    if "segment" not in hows:  # no free_segment to misuse
        misuses = tuple(kind for kind in misuses
                        if kind not in ("segment_gapped",) + SEGMENT_MISUSES)
    return Profile(page_sizes, interface, misuses, tuple(dict.fromkeys(tags)), hows)


def broken(trace: Trace, preconditions) -> list[str]:
    """The preconditions `trace` breaks (empty: the implementation supports it)."""
    profile = profile_for(preconditions)
    found = []
    if trace.interface != profile.interface:
        found.append(f"a {trace.interface}-interface trace for a {profile.interface}-interface "
                     f"class")
    if PAGE_SIZE_2_UP in preconditions and trace.page_size < 2:
        found.append(f"page size {trace.page_size}, supported: 2 and up")
    kinds = sorted({op.kind for op in trace.ops if isinstance(op, Misuse)} - set(profile.misuses))
    if kinds:
        found.append(f"misuse the class does not check: {', '.join(kinds)}")
    calls = sorted(_release_calls(trace) - set(profile.hows))
    if calls:
        found.append(f"releases by a call the class does not have: {', '.join(calls)}")
    return found


def _release_calls(trace: Trace) -> set[str]:
    """How `trace` releases pages: a finish's or truncate's `how`, an engine's by-slot calls."""
    found = {op.how for op in trace.ops if isinstance(op, (Finish, Truncate))}
    found |= {"page_ids" for op in trace.ops if isinstance(op, FreePages)}
    found |= {"segment" for op in trace.ops if isinstance(op, FreeSegments)}
    return found
