"""SGLang's prefix caches before 0.5.22, driven through their own scheduler calls: a lock is
`inc_lock_ref(node)` (the node is the receipt) and `dec_lock_ref(node)`; a running request is
cached with `cache_unfinished_req(req, chunked=True)` (which moves `req.last_node`'s lock), a
finished one with `insert_req(req, up_to=...)` (0.5.21; the release frees the rest) or
`cache_finished_req(req, kv_len_to_handle=...)` (0.5.18-0.5.20; before, it read
`req.pop_committed_kv_cache()`), which also frees the rest and drops the lock; `touch_prefix`
is a `match_prefix` (the same walk); `free_kv_row` (0.5.20 on) or the allocator's `free`.
`UnifiedRadixCache` (0.5.20, 0.5.21) has the same calls, but its `dec_lock_ref(node, params)`
takes the receipt its `inc_lock_ref` returned (`IncLockRefResult.to_dec_params()`), and its
request calls read the request's lock as `req.last_node` with `req.lock_receipt`: a lock is then
a `Held` (node, receipt), handed to the request before each request call (`_hand_over`).
SGLang 0.5.17-0.5.19's `UnifiedRadixCache` takes the receipt too (its `params` is optional, but
without it an SWA lock is never dropped), and reads it off the request as the receipt's own
fields (`req.swa_uuid_for_lock`, `req.skip_lock_node_ids`: `request_lock_fields`), which its
`cache_unfinished_req` writes back there.
What the oracle must follow from that is read here (`contract_names`) and modelled in
oracle/radix/contract.py."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from typing import Any, NamedTuple

from kvfuzz.impl.radix.calls import Calls, current


class Held(NamedTuple):
    """A lock of a release whose `dec_lock_ref` takes the receipt `inc_lock_ref` gave."""
    node: Any
    receipt: Any


def takes_receipt(cache) -> bool:
    """Whether `dec_lock_ref` needs the receipt (UnifiedRadixCache; RadixCache's is optional)."""
    try:
        params = inspect.signature(cache.dec_lock_ref).parameters
    except (TypeError, ValueError):
        return False
    found = params.get("params")
    return found is not None and found.default is inspect.Parameter.empty


def request_lock_fields(cls) -> tuple[str, ...]:
    """What the class's `_dec_req_lock` (UnifiedRadixCache before 0.5.22) reads of the request's
    lock besides `last_node`, read from its source: ('lock_receipt',) in 0.5.20 and 0.5.21,
    the receipt's fields ('skip_lock_node_ids', 'swa_uuid_for_lock') in 0.5.17-0.5.19; () where
    the class has no such call (it reads no lock off the request)."""
    try:
        source = inspect.getsource(cls._dec_req_lock)
    except (AttributeError, OSError, TypeError):
        return ()
    return tuple(sorted(set(re.findall(r"\breq\.(\w+)", source)) - {"last_node"}))


def calls_for(cache, allocator, rows) -> Calls:
    if current(cache):
        return Calls(cache, allocator, rows)
    return LegacyCalls(cache, allocator, rows)


def contract_names(cls) -> tuple[str, ...]:
    """What the oracle reads from a class's API (oracle/radix/contract.py, `BY_NAME`): () for
    0.5.22's calls; else `legacy_calls`, and `finish_splits_prompt` where its finish re-inserts
    the prompt (RadixCache 0.5.20 and 0.5.21; PureSWARadixCache never did)."""
    if current(cls):  # as calls_for decides: the contract follows the calls driven
        return ()
    finish = getattr(cls, "insert_req", None) or getattr(cls, "cache_finished_req", None)
    try:
        source = inspect.getsource(finish)
    except (OSError, TypeError):
        source = ""
    splits = "prompt_key" in source or "split_prompt=True" in source
    return ("legacy_calls",) + (("finish_splits_prompt",) if splits else ())


def legacy_gaps(cls) -> list[str]:
    """The calls a release before 0.5.22 must have for this adapter (empty: it can be driven)."""
    needed = ("inc_lock_ref", "dec_lock_ref", "cache_unfinished_req", "match_prefix")
    missing = [name for name in needed if not callable(getattr(cls, name, None))]
    if not any(callable(getattr(cls, name, None)) for name in ("insert_req",
                                                               "cache_finished_req")):
        missing.append("insert_req or cache_finished_req")
    return missing


# The receipt's fields a release before 0.5.20 reads off the request (`req.swa_uuid_for_lock`,
# and 0.5.17-0.5.19's `req.skip_lock_node_ids`), with what a receipt without one stands for.
MARK_DEFAULTS = {"skip_lock_node_ids": {}, "swa_uuid_for_lock": None}


def rewritten(receipt, request, names):
    """`receipt` with those of `names` it has as the release wrote them on the request (a
    receipt that is no dataclass has no fields to rewrite)."""
    if not dataclasses.is_dataclass(receipt):
        return receipt
    own = {field.name for field in dataclasses.fields(receipt)}
    fields = {name: getattr(request, name, MARK_DEFAULTS.get(name)) for name in names
              if name in own}
    if fields.get("skip_lock_node_ids", {}) is None:
        fields["skip_lock_node_ids"] = {}
    return dataclasses.replace(receipt, **fields) if fields else receipt


class LegacyCalls(Calls):
    def __init__(self, cache, allocator, rows):
        super().__init__(cache, allocator, rows)
        self.lock_fields = request_lock_fields(type(cache))
        # a release that reads the lock off the request takes its receipt back (0.5.17-0.5.19:
        # `params` optional, but an SWA lock is dropped by its uuid alone)
        self.receipts = takes_receipt(cache) or bool(self.lock_fields)

    def lock(self, node):
        result = self.cache.inc_lock_ref(node)
        return Held(node, result.to_dec_params()) if self.receipts else node

    def unlock(self, lock) -> None:
        if isinstance(lock, Held):
            self.cache.dec_lock_ref(lock.node, lock.receipt)
        elif lock is not None:
            self.cache.dec_lock_ref(lock)

    def _hand_over(self, request) -> None:
        """Where the release reads the request's lock as `last_node` + `lock_receipt`
        (UnifiedRadixCache's `_dec_req_lock`), the lock held is put there, and where it reads
        the receipt's own fields off the request (0.5.17-0.5.19), each of them (a receipt
        without one hands over its default)."""
        if isinstance(request.lock, Held):
            request.last_node, request.lock_receipt = request.lock
            for name in self.lock_fields:
                if name != "lock_receipt":
                    setattr(request, name, getattr(request.lock_receipt, name,
                                                   MARK_DEFAULTS.get(name)))
            request.swa_prefix_lock_released = False

    def _receipt_back(self, request):
        """The receipt of the lock a request call moved (`cache_unfinished_req`), where the
        release wrote it: `req.lock_receipt`, or (0.5.17-0.5.19) the receipt's fields, which
        make up the `DecLockRefParams` its `_dec_req_lock` builds from them."""
        if "lock_receipt" in self.lock_fields or not self.lock_fields:
            return request.lock_receipt
        return rewritten(request.lock_receipt, request, self.lock_fields)

    def checkpoint(self, request, finishing: bool) -> int:
        self._hand_over(request)
        if not finishing:
            # the scheduler's chunked prefill: insert, free the duplicates, match again,
            # repoint the row, move the lock from req.last_node to the key's node
            self.cache.cache_unfinished_req(request, chunked=True)
            request.lock = Held(request.last_node, self._receipt_back(request)) \
                if self.receipts else request.last_node
            return int(request.kv.cache_protected_len)
        if callable(getattr(self.cache, "insert_req", None)):  # 0.5.21
            self.cache.insert_req(request, up_to=request.filled)
            return int(request.kv.cache_protected_len)
        finish = self.cache.cache_finished_req
        if "kv_len_to_handle" in inspect.signature(finish).parameters:
            finish(request, kv_len_to_handle=request.filled)
        else:
            finish(request)  # reads req.pop_committed_kv_cache()
        # it freed the duplicates and everything past the key, and dropped the lock
        page_size = self.cache.page_size
        request.kv.cache_protected_len = request.filled // page_size * page_size
        request.done_by_finish, request.lock = True, None
        return request.kv.cache_protected_len

    def release(self, request) -> None:
        if getattr(request, "done_by_finish", False):
            return
        finish = getattr(self.cache, "cache_finished_req", None)
        if not callable(getattr(self.cache, "insert_req", None)) and callable(finish) and \
                "kv_len_to_handle" in inspect.signature(finish).parameters:
            # 0.5.18-0.5.20: release_kv_cache releases a finish it does not cache through
            # cache_finished_req(is_insert=False) too, which frees the row's own slots and
            # drops the lock (the pure-SWA cache's frees [protected, floor) there, which
            # free_kv_row skips as the window's)
            self._hand_over(request)
            finish(request, is_insert=False, kv_len_to_handle=request.filled)
            return
        kv = request.kv
        if callable(getattr(self.cache, "free_kv_row", None)):
            self.cache.free_kv_row(kv, [(kv.cache_protected_len, request.filled)])
        elif request.filled > kv.cache_protected_len:
            self.allocator.free(self.rows.req_to_token[
                kv.req_pool_idx, kv.cache_protected_len:request.filled].long())
        self.unlock(request.lock)

    def touch(self, key, match_params) -> None:
        self.cache.match_prefix(match_params(key=key))


def read_swa_cursor(driver, kv) -> int:
    """A request's SWA window cursor (how far its window has freed its SWA slots) where the
    release keeps it: `ReqKvInfo.get_evicted_seqlen(SWA)` from 0.5.21 on, the field
    `swa_evicted_seqlen` before (read from `free_swa_out_of_window_slots`, which writes it: it
    takes a `component_type` from 0.5.21 on; there is none before 0.5.14; before 0.5.16 the
    field is the request's, which `Request` keeps on `kv`). `driver.cursor_by_component` keeps
    the answer (None until first read); `driver.SWA` is the release's SWA component type."""
    if driver.cursor_by_component is None:
        common = importlib.import_module("sglang.srt.mem_cache.common")
        free = getattr(common, "free_swa_out_of_window_slots", None)  # (none before 0.5.14)
        driver.cursor_by_component = free is not None and \
            "component_type" in inspect.signature(free).parameters
    if driver.cursor_by_component:
        return int(kv.get_evicted_seqlen(driver.SWA))
    return int(kv.swa_evicted_seqlen)
