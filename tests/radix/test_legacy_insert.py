"""A load-back's `insert` on SGLang 0.5.10's `RadixCache`, without SGLang: that release's
`insert` takes the key as given (its `RadixKey` has no `page_aligned`; its callers cut keys to
whole pages first), so the driver cuts the key and the value to whole pages there, and hands a
later release's `insert` (which cuts them itself) everything. Beside the driver as it was, which
a 0.5.10 tree then held a partial page of (found by `kvfuzz diff radix` on 0.5.10: a page both in
the tree and on the free list)."""

from __future__ import annotations

from types import SimpleNamespace

from kvfuzz.impl.radix.driver import RadixDriver


class Key0510:
    def __init__(self, token_ids, extra_key=None):
        self.token_ids, self.extra_key = token_ids, extra_key


class Key0511(Key0510):
    def page_aligned(self, page_size):
        return self


def inserted(driver_class, key_class) -> tuple[list, list]:
    """(key tokens, value slots) the cache's `insert` got for 5 tokens at page size 2."""
    got = []
    driver = object.__new__(driver_class)
    driver.page_size, driver.device, driver.poison_keys, driver.passed = 2, "cpu", False, []
    driver.key_limit, driver.Key = False, key_class
    driver.InsertParams = lambda **fields: SimpleNamespace(**fields)
    driver.cache = SimpleNamespace(insert=lambda params: got.append(
        (list(params.key.token_ids), params.value.tolist())) or SimpleNamespace(prefix_len=0))
    driver.insert([1, 2, 3, 4, 5], 0, 0, [10, 11, 12, 13, 14])
    return got[0]


def test_0_5_10s_insert_gets_whole_pages_and_a_later_one_everything():
    assert inserted(RadixDriver, Key0510) == ([1, 2, 3, 4], [10, 11, 12, 13])
    assert inserted(RadixDriver, Key0511) == ([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])

    class AsItWas(RadixDriver):  # broken: every release handed the partial page
        def insert(self, tokens, ns, priority, slots):
            self.Key = Key0511
            return super().insert(tokens, ns, priority, slots)

    assert inserted(AsItWas, Key0510) == ([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
