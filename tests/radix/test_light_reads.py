"""Between two whole reads the radix judge reads only the sizes, the rows and a digest of every
node (`impl/radix/digest.py`): a cache that writes where the op it was called for does not
reach (a node off the matched path, another request's row, the allocator) is still caught, at
the op of the write where the light read shows it, else at the next whole read, whose report
says which ops it covers. Test doubles of the released `RadixCache`; skips without SGLang."""

import functools

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.radix.lockstep import RadixLockstep
from kvfuzz.fuzz.radix.target import RADIX
from kvfuzz.impl.radix import RELEASED
from kvfuzz.impl.registry import YOURS, Implementation, load_attribute
from kvfuzz.strategies.radix.profile import KEEPS_KEY, NO_RESET_IN_FLIGHT
from kvfuzz.strategies.radix.trace import Admit, Checkpoint, Extend, Insert, Match, Trace
from tests.helpers import divergence, needs_engine

pytestmark = needs_engine("sglang")
SGLANG = RADIX.catalogue.resolve("sglang.radix")

# r1 holds [1 2 3 4] in its row; [7 8] is cached off every path the probes below walk; the
# third probe (op 6, a light read: the whole ones are the first, every 8th and the last)
# is where each double writes. Probes of [9] miss.
TRACE = Trace(1, 32, "lru", False, (
    Admit(1, (1, 2, 3, 4, 5), 5), Extend(1, 4), Checkpoint(1), Insert((7, 8)),
    Match((9,)), Match((9,)), Match((9,)), Match((9,)), Match((9,)), Match((9,)), Match((9,))))
WRITE_AT = 6


def __getattr__(name):  # by import path: tests.radix.test_light_reads:OffPath, ...
    # a class's name only (a double's): pytest's collection probes a module's attributes
    # (`pytest_plugins`, `setUpModule`, ...), and building the doubles imports SGLang
    if name[:1].isupper() and name in doubles():
        return doubles()[name]
    raise AttributeError(name)


class WritesOnThirdMiss:
    """Mixed into a released cache: on the third miss it answers (op 6, `WRITE_AT`), it writes
    where no miss reaches (`write`)."""

    misses = 0

    def match_prefix(self, params):
        result = super().match_prefix(params)
        if params.req is None and list(params.key) == [9]:
            self.misses += 1
            if self.misses == 3:
                self.write()
        return result


@functools.cache
def doubles() -> dict:
    class Hostile(WritesOnThirdMiss, load_attribute(RELEASED)):
        pass

    class OffPath(Hostile):
        """Swaps the two slots of the cached [7 8], a node the miss never walks."""

        def write(self):
            node = next(n for n in self.root_node.children.values() if list(n.key) == [7, 8])
            node.value[:] = node.value.flip(0)

    class OtherRow(Hostile):
        """Writes over the first slot of every live request's row (r1's)."""

        def write(self):
            self.req_to_token_pool.req_to_token[1:, 0] += 1

    class PoolSwap(Hostile):
        """Puts a slot the tree holds in place of a free one on the allocator's free list: the
        free count stays, only the whole read's free pages show it."""

        def write(self):
            node = next(n for n in self.root_node.children.values() if list(n.key) == [7, 8])
            self.token_to_kv_pool_allocator.free_pages[0] = node.value[0]

    class PoolCount(Hostile):
        """Hands the allocator back a slot the tree holds: the free count moves."""

        def write(self):
            node = next(n for n in self.root_node.children.values() if list(n.key) == [7, 8])
            self.token_to_kv_pool_allocator.free(node.value[:1].clone())

    class SizeCount(Hostile):
        """Counts one token more evictable than its unlocked nodes hold: the light read's
        evictable size, which the judge sums over the model's views (`counter_problems`)."""

        def write(self):
            self.evictable_size_ += 1

    return {"OffPath": OffPath, "OtherRow": OtherRow, "PoolSwap": PoolSwap,
            "PoolCount": PoolCount, "SizeCount": SizeCount}


def double(attr: str) -> Implementation:
    return Implementation(attr, "radix", f"{__name__}:{attr}", "test double", YOURS,
                          preconditions=(NO_RESET_IN_FLIGHT, KEEPS_KEY))


def test_the_write_falls_between_two_whole_reads():
    assert RADIX.check(TRACE, SGLANG).status == AGREE
    assert WRITE_AT % RadixLockstep.FULL_EVERY and WRITE_AT < len(TRACE.ops) - 1


@pytest.mark.parametrize("attr, label, shows", [
    ("OffPath", "tree", "node [7 8]: value expected [5, 6], actual [6, 5]"),
    ("OtherRow", "row", "r1's row: expected [1, 2, 3, 4], actual [2, 2, 3, 4]"),
    ("PoolCount", "allocator", "1 pages both in the tree and on the free list"),
    ("SizeCount", "evictable_size", "expected 2, actual 3"),
])
def test_a_write_the_light_read_shows_is_caught_at_its_op(attr, label, shows):
    found = divergence("radix", TRACE, double(attr))
    assert found is not None and found.what.startswith(f"{label} at op {WRITE_AT} "), \
        found and found.report()
    report = found.report()
    assert shows in report and "whole read" not in report, report


def test_a_write_only_the_whole_read_shows_is_caught_there_saying_which_ops():
    found = divergence("radix", TRACE, double("PoolSwap"))
    whole = RadixLockstep.FULL_EVERY - 1  # the read after op 7 is the 9th: a whole one
    assert found is not None and found.what.startswith(f"allocator at op {whole} "), \
        found and found.report()
    report = found.report()
    assert "1 pages both in the tree and on the free list" in report, report
    assert f"may have changed in any op from 0 to {whole}" in report, report
