"""The scheduler's side of a prefix cache, as SGLang 0.5.23 keeps it: the request-to-token rows
(an int32 table, one row per live request, as `ReqToTokenPool.req_to_token`) and the fields of a
request (`Req`, `ReqKvInfo`) that `RadixCache.checkpoint` and `free_kv_row` read. Stand-ins, so
that no scheduler module (and none of what it imports) is loaded."""

from __future__ import annotations

from array import array

import torch

from kvfuzz.impl.poison import POISON


class Rows:
    """`req_to_token`: row 0 is padding, as upstream's; rows handed out from the top."""

    def __init__(self, rows: int, context: int, device: str):
        self.req_to_token = torch.zeros((rows + 1, max(1, context)), dtype=torch.int32,
                                        device=device)
        self.free_rows = list(range(1, rows + 1))

    def write(self, indices, values) -> None:
        self.req_to_token[indices] = values

    def take(self) -> int:
        return self.free_rows.pop()

    def release(self, row: int) -> None:
        """The row goes back; the next request to get it overwrites it (here: POISON at once, so
        a tree value that kept a view of it shows)."""
        self.req_to_token[row].fill_(POISON)
        self.free_rows.append(row)

    def clear(self) -> None:
        self.req_to_token.fill_(POISON)
        self.free_rows = list(range(1, self.req_to_token.shape[0]))


class KvRecord:
    """`ReqKvInfo`: [0, cache_protected_len) of the row is the tree's."""

    def __init__(self, row: int):
        self.req_pool_idx = row
        self.cache_protected_len = self.cache_inserted_len = 0
        self.kv_committed_len = self.kv_allocated_len = 0
        self.swa_evict_floor = self.swa_evicted_seqlen = 0
        self.component_evicted_seqlens: dict = {}

    @property
    def holds_kv(self) -> bool:
        return self.req_pool_idx is not None

    def get_evicted_seqlen(self, component) -> int:
        return self.component_evicted_seqlens.get(component, 0)

    def set_evicted_seqlen(self, component, length: int) -> None:
        """Where an SWA cache's checkpoint moves the request's out-of-window cursor."""
        self.component_evicted_seqlens[component] = length

    def swa_dead_lo(self, page_size: int) -> int:
        """The lowest row position the window may free: above the tree's prefix and the floor,
        page-ceiled above the prefix (as `ReqKvInfo.swa_dead_lo`)."""
        lo = max(self.cache_protected_len, self.swa_evict_floor)
        if page_size > 1 and lo > self.cache_protected_len:
            lo = -(-lo // page_size) * page_size
        return lo


class Request:
    """`Req`: its tokens, prompt, namespace (`extra_key`), priority, lock and matched node."""

    def __init__(self, rid: int, tokens, prompt: int, extra_key, priority: int, row: int):
        self.rid = f"r{rid}"
        self.tokens = list(tokens)
        self.origin_input_ids = array("q", self.tokens[:prompt])
        self.full_untruncated_fill_ids = array("q")
        self.extra_key, self.cache_salt, self.priority = extra_key, None, priority
        self.kv = KvRecord(row)
        self.lock = self.last_node = None
        self.prefix_len = 0
        # what the unified cache's checkpoint reads: no streaming session, no KV sharding
        self.session = self.session_id = self.kv_rotation_base = None
        self.swa_branching_seqlen = None  # an SWA cache's match sets it, its checkpoint reads it
        # the lock's receipt as UnifiedRadixCache 0.5.17-0.5.19 read it off the request (Req's
        # defaults: no SWA lock, nothing skipped, its SWA part not yet dropped by a decode)
        self.swa_uuid_for_lock, self.skip_lock_node_ids = None, {}
        self.swa_prefix_lock_released = False

    # what the releases before 0.5.20 read on the request itself (later: on `req.kv`), and the
    # finish of those before 0.5.18 (impl/radix/legacy.py)
    @property
    def req_pool_idx(self) -> int:
        return self.kv.req_pool_idx

    @property
    def cache_protected_len(self) -> int:
        return self.kv.cache_protected_len

    @cache_protected_len.setter
    def cache_protected_len(self, length: int) -> None:
        self.kv.cache_protected_len = length

    @property
    def output_ids(self):
        return array("q", self.tokens[len(self.origin_input_ids):self.filled])

    # (the SWA window's cursor and floor: 0 in a radix trace; an SWA cache before 0.5.16 writes
    # and reads them on the request itself, later ones on `req.kv`, where the driver reads them)
    @property
    def swa_evicted_seqlen(self) -> int:
        return self.kv.swa_evicted_seqlen

    @swa_evicted_seqlen.setter
    def swa_evicted_seqlen(self, length: int) -> None:
        self.kv.swa_evicted_seqlen = length

    @property
    def swa_evict_floor(self) -> int:
        return self.kv.swa_evict_floor

    @swa_evict_floor.setter
    def swa_evict_floor(self, floor: int) -> None:
        self.kv.swa_evict_floor = floor

    def pop_committed_kv_cache(self) -> int:
        return self.kv.kv_committed_len

    @property
    def fill_ids(self):  # what cache_unfinished_req reads before get_fill_ids (0.5.11)
        return self.full_untruncated_fill_ids

    def get_fill_ids(self):
        return self.full_untruncated_fill_ids

    @property
    def filled(self) -> int:
        return self.kv.kv_allocated_len

    def grow(self, count: int) -> None:
        self.kv.kv_allocated_len = self.kv.kv_committed_len = self.filled + count
        self.full_untruncated_fill_ids = array("q", self.tokens[:self.filled])

    def finished(self) -> bool:  # checkpoint asks; a released request is
        return False
