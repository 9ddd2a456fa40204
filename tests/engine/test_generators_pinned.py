"""Every target's seeded generator is pinned: input `index` of seed 0 keeps its content id until
the generator's version changes (a corpus file, a report's `original` line and a user's
`kvfuzz diff --seed S --start I` all rely on it). A target missing here fails the test."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.targets import TARGETS

# target: (the generator's name, as it appears in an input's origin; ids of inputs 0, 1, 2)
PINNED = {
    "extend": ("extend/1", ["909f352be2342775", "36bf77dc9ea007fe", "5a7d4ad59224b29e"]),
    "decode": ("decode/1", ["2298e7a60ab6db2e", "a2ce158febcbf305", "a5c43e42fe67753c"]),
    "allocator": ("allocator/3", ["36622f03efc56435", "c914351f0698b490", "8e0db0de7875d696"]),
    "compaction": ("compaction/5", ["130468221d7ac5fb", "cec485c990374dc5",
                                    "9b9f95c3778b9c02"]),
    "mamba": ("mamba/1", ["a5eeb8ffc56969ec", "f229085b3cbb83a7", "143e3cd979f539a3"]),
    "swa": ("swa/3", ["e18f06e4ea50030f", "d3973f9c8bcbe312", "1d552d28ead0bcd5"]),
    "blockpool": ("blockpool/4", ["f1cd9b45588a6523", "eabed024bd8511ac", "b9007003572295fb"]),
    "kvmanager": ("kvmanager/5", ["1de931cdd1f3aa98", "9d189dd393ccbb21", "7ccd125c98953deb"]),
    "radix": ("radix/2", ["27315acd65912a30", "daf5bf33ccaa4dcb", "512fe39e67281b37"]),
    "offload": ("offload/2", ["8651bc0dd8f995c3", "7b572cacbf0b6451", "b54a94b4d2c2a0fc"]),
    "unified": ("unified/1", ["d53aad08da5dfe4c", "da9111178afa1fcb", "cd3f51fddc5029a0"]),
}


def test_every_target_is_pinned():
    assert sorted(PINNED) == sorted(TARGETS)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_the_seeded_generator_is_pinned(name):
    target = TARGETS[name]
    generator, ids = PINNED[name]
    inputs = [target.generator.generate(0, index) for index in range(len(ids))]
    assert [target.codec.input_id(item) for item in inputs] == ids
    assert {(item.origin.generator, item.origin.seed) for item in inputs} == {(generator, 0)}
    assert [item.origin.index for item in inputs] == list(range(len(ids)))
