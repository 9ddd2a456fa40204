"""What the driver reads of a manager that an older vLLM release shipped without a call
(quick): the scheduler's every-step copy release (`release_copies`) on a manager with no
`take_kv_cache_block_copies` (vLLM 0.24 and 0.25, before copy-on-write) is "no copies", not a
crash in the state read; where the call exists, the retained blocks are freed; before 0.25
`remove_skipped_blocks` takes no prompt length. The history
table showed the crash on a "mamba align" trace (docs/release-history.md, 2026-12-05)."""

from __future__ import annotations

from types import SimpleNamespace

from kvfuzz.impl.kvmanager.driver import KVManagerDriver


def driver_over(manager) -> KVManagerDriver:
    driver = object.__new__(KVManagerDriver)  # the reads only: no vLLM manager is built
    driver.manager = manager
    return driver


def test_a_manager_without_copy_on_write_has_no_copies_to_release():
    assert driver_over(SimpleNamespace()).release_copies() == 0


def test_retained_blocks_of_the_copies_are_freed():
    freed = []
    pool = SimpleNamespace(free_blocks=freed.extend)
    manager = SimpleNamespace(block_pool=pool,
                              take_kv_cache_block_copies=lambda: (["copy"], ["block"]))
    assert driver_over(manager).release_copies() == 1
    assert freed == ["block"]


def test_remove_skipped_blocks_gets_the_prompt_length_only_where_taken():
    # before vLLM 0.25: remove_skipped_blocks(request_id, total_computed_tokens), no third
    calls = []

    class Old:
        def remove_skipped_blocks(self, request_id, total_computed_tokens):
            calls.append((request_id, total_computed_tokens))

    driver = driver_over(Old())
    driver.requests = {1: SimpleNamespace(request_id="1", num_prompt_tokens=5)}
    driver.remove_skipped_blocks(1, 4)
    assert calls == [("1", 4)]
