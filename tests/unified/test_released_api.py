"""A `UnifiedRadixCache` with neither today's scheduler calls nor the old ones is one line
(moved from tests/engine/test_released_api.py). No real earlier release is needed."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import ImplementationError


def test_a_unified_cache_without_todays_scheduler_calls_or_the_old_ones_is_one_line():
    # SGLang 0.5.20 and 0.5.21 are driven through their own calls (tests/unified/test_legacy.py);
    # a class with neither today's nor those is one line, as the radix target says it
    target = TARGETS["unified"]
    entry = target.catalogue.resolve("sglang.unified.rust")

    class Old:
        def inc_lock_ref(self, node): pass
        def touch_prefix(self, key): pass

    with pytest.raises(ImplementationError, match=r"^not supported: sglang .*: Old has neither "
                                                   r"lock, unlock, checkpoint \(0\.5\.22 on\) "
                                                   r"nor dec_lock_ref, cache_unfinished_req"):
        target.catalogue.declare(entry, Old)
    assert target.catalogue.declare(entry, type("New", (Old,), {
        "lock": Old.touch_prefix, "unlock": Old.touch_prefix, "checkpoint": Old.touch_prefix,
        "free_kv_row": Old.touch_prefix})) is entry
