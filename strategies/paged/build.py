"""Valid-by-construction extend/decode cases, built from a stream of choices.

One builder serves three sources of choices: `random.Random` (the seeded generator), a Hypothesis
`draw` (properties, with shrinking) and fuzzer bytes (atheris). Options are listed simplest
first, because Hypothesis shrinks toward the first. Every edge class of `strategies.edges` is
reachable on purpose, not by luck.
"""

from __future__ import annotations

from typing import Protocol, Sequence, TypeVar

from kvfuzz.strategies.inputs import Origin, ceil_pages
from kvfuzz.strategies.paged.case import Case, max_page_id

T = TypeVar("T")

# Page sizes by edge class first, then a value inside it: a flat list of 14 values left the
# rarer classes unreached in a 150-example hypothesis run.
PAGE_SIZES = ((4, 8, 16), (1,), (2,), (3, 5, 7, 24, 100), (64,), (128,), (256, 1024))
TOKEN_BUDGET = 6144  # per case: keeps the per-token oracle and the loop baseline cheap
FAULTS = ("pool short", "seq < prefix", "last_loc misaligned", "output length")


class Chooser(Protocol):
    def integer(self, low: int, high: int) -> int: ...  # inclusive bounds
    def choice(self, options: Sequence[T]) -> T: ...
    def distinct(self, low: int, high: int, count: int) -> list[int]: ...
    def shuffled(self, values: list[int]) -> list[int]: ...


def batch_size(ch: Chooser) -> int:
    # Mostly small batches (the loop baseline costs O(batch)); one in ten is large.
    kind = ch.choice(("one", "one", "few", "few", "few", "few", "few", "few", "few", "many"))
    if kind == "one":
        return 1
    return ch.integer(2, 8) if kind == "few" else ch.integer(32, 128)


def prefix_len(ch: Chooser, page_size: int) -> int:
    kind = ch.choice(("zero", "any", "aligned"))
    if kind == "zero":
        return 0
    if kind == "aligned":
        return page_size * ch.integer(1, 4)
    return ch.integer(1, 4 * page_size)


def seq_len(ch: Chooser, prefix: int, page_size: int) -> int:
    """A target length after the extend, by the shape of the extend."""
    ceil_prefix = ceil_pages(prefix, page_size) * page_size
    kind = ch.choice(("short", "zero", "in_page", "to_boundary", "aligned_end", "many_pages"))
    if kind == "zero":
        return prefix
    if kind == "in_page" and ceil_prefix > prefix:
        return ch.integer(prefix + 1, ceil_prefix)
    if kind == "to_boundary":
        return (prefix // page_size + 1) * page_size
    if kind == "aligned_end":
        return ceil_prefix + page_size * ch.integer(1, 3)
    if kind == "many_pages":
        most = max(4, min(24, 2048 // page_size))
        return prefix + ch.integer(3 * page_size, most * page_size)
    return prefix + ch.integer(1, 2 * page_size)


def page_ids(ch: Chooser, page_size: int, count: int) -> list[int]:
    """`count` distinct page ids from the low, middle or top of the range a 64-bit slot allows."""
    top = max_page_id(page_size)
    span = 2 * count + 8
    where = ch.choice(("low", "low", "high", "top"))
    if where == "low":
        low = 1
    elif where == "high":
        low = ch.integer(2**20, min(2**40, top - span))
    else:
        low = max(1, top - span + 1)
    return ch.distinct(low, min(top, low + span - 1), count)


def ordered(ch: Chooser, ids: list[int]) -> list[int]:
    """The pool in ascending, random or descending order."""
    order = ch.choice(("ascending", "random", "descending"))
    ids = sorted(ids)
    if order == "descending":
        ids.reverse()
    elif order == "random":
        ids = ch.shuffled(ids)
    return ids


def pool_size(ch: Chooser, demand: int) -> int:
    """Empty (only when nothing is needed), exactly the demand, or with slack."""
    kind = ch.choice(("exact", "slack", "empty"))
    if kind == "slack":
        return demand + ch.integer(1, 8)
    return demand  # "empty" is exact when nothing is needed, and exact otherwise


def held_and_free(ch: Chooser, page_size: int, num_held: int, demand: int):
    """Pages already held by the requests, and a pool disjoint from them."""
    size = pool_size(ch, demand)
    ids = page_ids(ch, page_size, num_held + size)
    held, free = ids[:num_held], ids[num_held:]
    return held, ordered(ch, free)


def choose_page_size(ch: Chooser) -> int:
    return ch.choice(ch.choice(PAGE_SIZES))


def build_extend(ch: Chooser, origin: Origin | None = None) -> Case:
    page_size = choose_page_size(ch)
    num_requests = batch_size(ch)
    zero_at = ch.choice(("none", "first", "middle", "last"))
    forced_zero = {"none": -1, "first": 0, "middle": num_requests // 2,
                   "last": num_requests - 1}[zero_at]
    # One batch in four needs no new page at all: the only batches an empty pool may serve, and
    # too rare to arise by chance from independent per-request choices.
    no_new_page = ch.choice((False, False, False, True))
    prefixes, seqs, budget = [], [], TOKEN_BUDGET
    for rid in range(num_requests):
        prefix = prefix_len(ch, page_size)
        if rid == forced_zero:
            seq = prefix
        elif no_new_page:
            seq = ch.integer(prefix, ceil_pages(prefix, page_size) * page_size)
        else:
            seq = seq_len(ch, prefix, page_size)
        seq = prefix + min(seq - prefix, budget)
        budget -= seq - prefix
        prefixes.append(prefix)
        seqs.append(seq)
    demand = sum(ceil_pages(s, page_size) - ceil_pages(q, page_size)
                 for q, s in zip(prefixes, seqs))
    held, free = held_and_free(ch, page_size, num_requests, demand)
    last_loc = [held[rid] * page_size + (q - 1) % page_size if q > 0 else -1
                for rid, q in enumerate(prefixes)]
    return Case("extend", page_size, tuple(seqs), tuple(last_loc), tuple(free),
                prefix_lens=tuple(prefixes), origin=origin)


def build_decode(ch: Chooser, origin: Origin | None = None) -> Case:
    page_size = choose_page_size(ch)
    seqs = []
    for _ in range(batch_size(ch)):
        kind = ch.choice(("mid_page", "opens_page", "first_token"))
        pages_before = ch.integer(0, 6)
        if kind == "first_token":
            seqs.append(1)
        elif kind == "opens_page" or page_size == 1:
            seqs.append(pages_before * page_size + 1)
        else:
            seqs.append(pages_before * page_size + ch.integer(2, page_size))
    demand = sum(1 for s in seqs if (s - 1) % page_size == 0)
    held, free = held_and_free(ch, page_size, len(seqs), demand)
    last_loc = [held[rid] * page_size + (s - 2) % page_size if s >= 2 else -1
                for rid, s in enumerate(seqs)]
    return Case("decode", page_size, tuple(seqs), tuple(last_loc), tuple(free), origin=origin)


def break_contract(ch: Chooser, case: Case, fault: str) -> Case:
    """A copy of a valid case pushed outside the contract in one named way (or unchanged when
    the case has no room for that fault, e.g. a short pool for a batch that needs no page)."""
    seqs, last_loc = list(case.seq_lens), list(case.last_loc)
    prefixes, free = list(case.prefix_lens), list(case.free_pages)
    rid = ch.integer(0, case.batch_size - 1)
    out_len = None
    if fault == "pool short":
        demand = case.pages_needed()
        free = free[:ch.integer(0, demand - 1)] if demand else free
    elif fault == "seq < prefix" and case.target == "extend" and prefixes[rid] > 0:
        seqs[rid] = prefixes[rid] - ch.integer(1, prefixes[rid])
    elif fault == "last_loc misaligned" and case.page_size > 1 and last_loc[rid] >= 0:
        last_loc[rid] += ch.integer(1, case.page_size - 1)
    elif fault == "output length":
        out_len = max(0, case.contract_out_len() + ch.choice((1, -1, 2, -3)))
    return Case(case.target, case.page_size, tuple(seqs), tuple(last_loc), tuple(free),
                prefix_lens=tuple(prefixes), out_len=out_len, origin=case.origin,
                note=f"outside the contract on purpose: {fault}")
