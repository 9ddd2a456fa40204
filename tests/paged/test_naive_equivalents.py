"""The declared equivalent mutants of SGLang's `alloc_extend_naive` on its `done_after_1` line
(`impl/equivalent_mutants.json`, line 78 of the 0.5.23 source) checked against their reason: on
every single request of up to three pages past its prefix, and on seeded batches of one to four,
within the contract (a page-aligned `last_loc`, a pool of at least the pages needed), each writes
exactly the slots the released function writes; and the comparison can see a difference: an
undeclared mutant of the same expression (`prefix * num1`) writes others. Skips without SGLang."""

from __future__ import annotations

import random

import pytest

from tests.helpers import mutant_module, needs_engine

pytestmark = needs_engine("sglang")  # (the slow tier)
MODULE = "sglang.srt.mem_cache.allocator.paged"
LINE = f"{MODULE}:78:"
DECLARED = ("32:ReplaceBinaryOperator_Add_BitOr:4", "32:ReplaceBinaryOperator_Add_BitAnd:4",
            "32:ReplaceBinaryOperator_Add_BitXor:4", "32:ReplaceBinaryOperator_Add_Sub:4",
            "32:ReplaceBinaryOperator_Add_RShift:4", "32:ReplaceBinaryOperator_Add_Div:4",
            "40:ReplaceComparisonOperator_Eq_Gt:3", "40:ReplaceComparisonOperator_Eq_GtE:3")


def request(prefix: int, seq: int, page_size: int, page: int) -> tuple[int, int, int]:
    """(prefix, seq, last_loc): the prefix's last slot in page `page`, -1 without a prefix."""
    return prefix, seq, -1 if prefix == 0 else page * page_size + (prefix - 1) % page_size


def cases():
    rng = random.Random(0)
    for page_size in (1, 2, 4, 8):
        for prefix in range(3 * page_size + 1):
            for seq in range(prefix, prefix + 3 * page_size + 1):
                yield page_size, [request(prefix, seq, page_size, 12)], 0
        for _ in range(100):
            batch = []
            for _ in range(rng.randint(1, 4)):
                prefix = rng.randrange(3 * page_size + 1)
                batch.append(request(prefix, prefix + rng.randrange(3 * page_size + 1),
                                     page_size, rng.randrange(40, 60)))
            yield page_size, batch, rng.choice((0, 0, 1, 3))  # spare pages in the pool


def slots(alloc_extend_naive, page_size: int, batch, spare: int, seed: int) -> list[int]:
    import torch

    prefix, seq, last_loc = (torch.tensor(column, dtype=torch.int64) for column in zip(*batch))
    needed = sum(-(-s // page_size) - -(-p // page_size) for p, s, _ in batch)
    pool = torch.tensor(random.Random(seed).sample(range(1, 40), needed + spare),
                        dtype=torch.int64)
    out = torch.empty(int((seq - prefix).sum()), dtype=torch.int64)
    alloc_extend_naive(prefix, seq, last_loc, pool, out, page_size, "cpu")
    return out.tolist()


@pytest.fixture(scope="module")
def released_slots():
    import importlib

    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import(MODULE):
        released = importlib.import_module(MODULE).alloc_extend_naive
    return [slots(released, *case, seed) for seed, case in enumerate(cases())]


def differing(mutant: str, expected: list) -> int:
    mutated = mutant_module(MODULE, LINE + mutant).alloc_extend_naive
    return sum(slots(mutated, *case, seed) != want
               for seed, (case, want) in enumerate(zip(cases(), expected)))


@pytest.mark.parametrize("mutant", DECLARED)
def test_a_declared_mutant_writes_the_released_slots(mutant, released_slots):
    assert differing(mutant, released_slots) == 0


def test_an_undeclared_mutant_of_the_line_differs(released_slots):
    assert differing("32:ReplaceBinaryOperator_Add_Mul:4", released_slots) > 0
