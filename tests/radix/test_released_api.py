"""A radix cache's match result read by the names the installed release has (moved from
tests/engine/test_released_api.py). No real earlier release is needed."""

from __future__ import annotations


def test_a_radix_match_is_read_from_what_the_releases_match_result_has():
    # SGLang before 0.5.22: MatchResult has the matched slots (`device_indices`), no
    # `device_prefix_len`, and RadixCache no `path_device_indices` (the path is read up the
    # parents). A driver that read only today's fields fails here.
    from types import SimpleNamespace

    import torch

    from kvfuzz.impl.radix.driver import RadixDriver, matched_len

    root = SimpleNamespace(parent=None, value=None)
    upper = SimpleNamespace(parent=root, value=torch.tensor([7, 8]))
    lower = SimpleNamespace(parent=upper, value=torch.tensor([3]))
    old = SimpleNamespace(device_indices=torch.tensor([7, 8, 3]), last_device_node=lower)
    assert matched_len(old) == 3
    assert matched_len(SimpleNamespace(device_prefix_len=2, device_indices=None)) == 2
    driver = RadixDriver.__new__(RadixDriver)  # only its cache is read
    driver.cache = SimpleNamespace(root_node=root)
    assert driver.path(lower).tolist() == [7, 8, 3] and driver.path(root).tolist() == []
    driver.cache.path_device_indices = lambda node: torch.tensor([1])
    assert driver.path(lower).tolist() == [1]  # where the release has the call, it is asked
