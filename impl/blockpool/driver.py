"""Calls a block pool with vLLM `BlockPool`'s interface (vllm 0.33.0) in plain ints: block ids go
in as the pool's own `KVCacheBlock` objects (`pool.blocks[id]`), hashes as vLLM's byte strings,
requests as the few fields the pool reads, and results, state and KV events come out as ids,
ints and `strategies.blockpool.events` records.

The state is read the way a debugger would, from the structures the contract names: each block's
`ref_cnt`, `block_hash` (and extra entries) and `block_hash_num_tokens`, the free queue walked
link by link from its head (so a broken list is reported, not followed forever) and then through
its own readers, which must agree with the links, and the hash-to-block map."""

from __future__ import annotations

from itertools import islice
from operator import attrgetter
from types import SimpleNamespace

from kvfuzz.impl.changed_reads import ChangedReads
from kvfuzz.strategies.blockpool.events import IMAGE, SALT, Cleared, Removed, Stored

GROUP_BYTES = 4  # vLLM packs a group id after the hash, 4 bytes big-endian


def hash_bytes(value: int) -> bytes:
    return value.to_bytes(8, "big")


def hash_int(value) -> int:
    """An event's hash (bytes, or an int where VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES is set)."""
    return value if isinstance(value, int) else int.from_bytes(bytes(value), "big")


def plain_events(events) -> list:
    """A pool's (or manager's) KV events as plain records; an event of another kind raises."""
    out = []
    for event in events:
        kind = type(event).__name__
        if kind == "BlockStored":
            # (no lookahead_token_ids before vLLM 0.30: a release without lookahead hashing;
            # no group kind or window in vLLM 0.20's events: read as a bare pool's, None)
            keys, ahead = event.extra_keys, getattr(event, "lookahead_token_ids", None)
            out.append(Stored(
                tuple(hash_int(h) for h in event.block_hashes),
                None if event.parent_block_hash is None else hash_int(event.parent_block_hash),
                tuple(int(t) for t in event.token_ids), int(event.block_size), event.group_idx,
                None if keys is None else tuple(None if k is None else tuple(k) for k in keys),
                None if ahead is None else tuple(tuple(int(t) for t in a) for a in ahead),
                getattr(event, "kv_cache_spec_kind", None),
                getattr(event, "kv_cache_spec_sliding_window", None)))
        elif kind == "BlockRemoved":
            out.append(Removed(tuple(hash_int(h) for h in event.block_hashes), event.group_idx))
        elif kind == "AllBlocksCleared":
            out.append(Cleared())
        else:
            raise TypeError(f"a KV event of an unknown kind: {kind}")
    return out


def request(prompt):
    """What a pool reads of a vLLM `Request` (`events.Prompt`): its block hashes (one per hash
    unit), its tokens, the extra keys of its block hashes (its multimodal inputs, a cache salt
    or not; no LoRA, no prompt embeddings)."""
    images = [SimpleNamespace(identifier=IMAGE.format(i), modality="image",
                              mm_position=SimpleNamespace(offset=offset, length=length))
              for i, (offset, length) in enumerate(prompt.images)]
    return SimpleNamespace(block_hashes=[hash_bytes(h) for h in prompt.hashes],
                           all_token_ids=list(prompt.tokens), lora_request=None,
                           mm_features=images, cache_salt=SALT if prompt.salt else None,
                           prompt_embeds=None, session_id=None)


def decode_key(key) -> tuple[int, int]:
    """(hash, group) of a `BlockHashWithGroupId`, as the driver encoded it. Each key once: the
    pool is read after every op, its keys decoded again and again (`_DECODED`, bounded)."""
    if type(key) is bytes:  # the common case: hashable, and equal only to the same bytes
        found = _DECODED.get(key)
        if found is not None:
            return found
    raw = bytes(key)
    found = int.from_bytes(raw[:-GROUP_BYTES], "big"), int.from_bytes(raw[-GROUP_BYTES:], "big")
    if type(key) is bytes:
        if len(_DECODED) >= 1 << 16:
            _DECODED.clear()
        _DECODED[key] = found
    return found


_DECODED: dict[bytes, tuple[int, int]] = {}
_unknown = {}.get  # (a reader that translates keys: nothing known, each decoded its way)
# A block's fields, read over the whole pool after every op (map, not a Python loop per block)
_BLOCK_ID, _REF_CNT = attrgetter("block_id"), attrgetter("ref_cnt")
_NUM_TOKENS = attrgetter("block_hash_num_tokens")


class PoolReader(ChangedReads):
    """The state of a pool with vLLM `BlockPool`'s structures, read after every call."""

    def __init__(self, pool, blocks: int):
        self.pool, self.size = pool, blocks

    def pool_state(self, since: int, writable: bool, metrics: bool):
        """Every read below in one answer, as what changed since read `since`
        (`ChangedReads`); `writable`, `metrics`: whether those two are read."""
        ref, keys, tokens, linked = self._each_block()
        queue, links = self.free_queue(linked)
        return self.changed("pool_state", since, {
            "num_free": self.num_free(), "queue": queue, "links": links,
            "ref": ref, "keys": keys, "cache": self.cache_map(),
            "null": self.null_block(), "tokens": tokens, "usage": self.usage(),
            "writable": self.writable() if writable else None,
            "tracked": self.tracked() if metrics else None})

    def _each_block(self) -> tuple[list, list, list | None, list | None]:
        """`ref_counts()`, `keys()`, `hash_tokens()` and the blocks holding a free-queue link
        (`_stale_links`), in one pass over the blocks where there were four (the pool is read
        after every op), each field read as those methods read it. A reader that reads any of
        the three its own way (a live pool's translated keys) is asked each (linked: None)."""
        cls = type(self)
        if cls.keys is not PoolReader.keys or cls.decode_key is not PoolReader.decode_key or \
                cls.ref_counts is not PoolReader.ref_counts or \
                cls.hash_tokens is not PoolReader.hash_tokens:
            return self.ref_counts(), self.keys(), self.hash_tokens(), None
        counted = hasattr(type(self.pool.null_block), "block_hash_num_tokens")
        ref, keys, tokens, linked = [], [], [] if counted else None, []
        known = _DECODED.get  # (`decode_key`'s own cache, asked here for exact bytes only)
        for block in self.pool.blocks:  # (each field as its own read above reads it)
            ref.append(int(block.ref_cnt))
            key = block.block_hash
            keys.append(None if key is None else
                        (type(key) is bytes and known(key)) or decode_key(key))
            if counted:
                tokens.append(block.block_hash_num_tokens)
            if block.prev_free_block is not None or block.next_free_block is not None:
                linked.append(block)
        return ref, self._extra_entries(keys, decode_key), tokens, linked

    def num_free(self) -> int:
        return int(self.pool.get_num_free_blocks())

    def decode_key(self, key) -> tuple[int, int]:
        """(hash, group) of a pool key as the oracle names it (a live pool's hashes are the
        engine's own: `impl/kvmanager/live.py` translates them)."""
        return decode_key(key)

    def null_block(self) -> int:
        return int(self.pool.null_block.block_id)

    def ref_counts(self) -> list[int]:
        return list(map(int, map(_REF_CNT, self.pool.blocks)))

    def hash_tokens(self) -> list | None:
        """The prefix tokens each block's primary entry covers (None: no entry). None for the
        whole pool where the release's blocks keep no such count (vLLM 0.20: an entry covers
        its whole block), so that view is left out."""
        if not hasattr(type(self.pool.null_block), "block_hash_num_tokens"):
            return None
        return list(map(_NUM_TOKENS, self.pool.blocks))

    def tracked(self) -> dict[int, int] | None:
        """The blocks a residency metrics collector tracks, with the accesses it keeps of each
        (None: no collector)."""
        collector = getattr(self.pool, "metrics_collector", None)
        if collector is None:
            return None
        return {int(block): len(state.access_history)
                for block, state in collector.block_metrics.items()}

    def usage(self) -> float:
        return float(self.pool.get_usage())

    def writable(self) -> list[int] | None:
        """The blocks the pool says are writable; None where it has no such read (vLLM before
        0.29): that check is left out, the rest of the pool's state is still compared."""
        is_writable = getattr(self.pool, "is_block_writable", None)
        if is_writable is None:
            return None
        return [int(block.block_id) for block in self.pool.blocks if is_writable(block)]

    def _decoder(self):
        """`decode_key`: the module's function itself where this reader does not translate keys
        (a method call less for every key of every read)."""
        return decode_key if type(self).decode_key is PoolReader.decode_key else self.decode_key

    def keys(self) -> list:
        """Each block's (hash, group), or None; a block with more than one entry (vLLM's partial
        entries) shows them all as a list, the primary first."""
        decode = self._decoder()
        return self._extra_entries([None if (key := block.block_hash) is None else decode(key)
                                    for block in self.pool.blocks], decode)

    def _extra_entries(self, keys: list, decode) -> list:
        """`keys` (each block's primary entry) with the further entries of a block that has
        more than one (vLLM's partial entries) put in as `keys` describes."""
        extra = getattr(self.pool, "cached_block_hashes_by_block", {}) or {}
        for block_id, more in extra.items():  # only blocks with more than one entry
            if more:
                keys[block_id] = [keys[block_id], *sorted(decode(k) for k in more)]
        return keys

    def cache_map(self) -> dict[tuple[int, int], list[int]]:
        entries, decode = {}, self._decoder()
        # (`decode_key`'s cache asked here for exact bytes, where the reader does not translate)
        known = _DECODED.get if decode is decode_key else _unknown
        for key, value in self.pool.cached_block_hash_to_block._cache.items():
            entries[(type(key) is bytes and known(key)) or decode(key)] = \
                [int(block.block_id) for block in value.values()] \
                if isinstance(value, dict) else [int(value.block_id)]
        return entries

    def free_queue(self, linked=None) -> tuple[list[int], str | None]:
        """The free queue head first, and what is wrong with its links (None when nothing);
        `linked`: the blocks holding a link, where the caller has just read them."""
        queue = self.pool.free_block_queue
        head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
        order, previous, node = [], head, head.next_free_block
        while node is not tail:
            if node is None:
                return order, f"the list ends after {len(order)} blocks without reaching its tail"
            if node.prev_free_block is not previous:
                return order, (f"block {node.block_id}'s prev link does not point at the block "
                               f"before it in the list")
            order.append(int(node.block_id))
            if len(order) > self.size:
                return order, "the list has more entries than the pool has blocks (a cycle)"
            previous, node = node, node.next_free_block
        if tail.prev_free_block is not previous:
            return order, "the tail's prev link does not point at the last block"
        stale = _stale_links(self.pool.blocks if linked is None else linked, order)
        if stale:
            return order, stale
        # The readers walk the links just walked: on the same chain (the same queue, the same
        # blocks in the same order) they answer as they did, so they are asked again only when
        # the chain differs from the last one they agreed with (most ops leave the queue as it
        # was; a reader wrong on some chain is wrong on the first read of that chain).
        chain = (queue, head, list(order))  # (a copy: the caller may change the list)
        held = self.__dict__.get("_readers_agreed")
        if held is not None and held[0] is queue and held[1] is head and held[2] == order:
            return order, None
        disagree = _readers_disagree(queue, order)
        self.__dict__["_readers_agreed"] = None if disagree else chain
        return order, disagree


def _stale_links(blocks, order: list[int]) -> str | None:
    """A block off the free queue must hold no link into it: the queue unlinks every block it
    hands out (`popleft`, `popleft_n`, `remove`), and `remove()` tells a block that is not free
    (a caller's misuse) by its missing links. None when every such block is unlinked. `blocks`:
    the pool's, or those of them that hold a link (the rest pass whatever `order` is)."""
    free = set(order)
    for block in blocks:  # (the links first: most blocks have none, and then nothing to ask)
        if (block.prev_free_block is not None or block.next_free_block is not None) and \
                int(block.block_id) not in free:
            kept = [name for name in ("prev", "next")
                    if getattr(block, f"{name}_free_block") is not None]
            if kept:
                return (f"block {block.block_id} is off the free queue but keeps its "
                        f"{' and '.join(kept)} link")
    return None


def _readers_disagree(queue, order: list[int]) -> str | None:
    """What the queue's own readers say that its links do not: `get_all_free_blocks()` (the
    census vLLM's tests read) and `iter_blocks_after(cursor)` (the walk in eviction order vLLM's
    simple CPU offloading manager resumes from a cursor), from the head and from the middle
    block. None when they agree; a reader a release lacks is left out."""
    census = getattr(queue, "get_all_free_blocks", None)
    if census is not None and (found := list(map(int, map(_BLOCK_ID, census())))) != order:
        return f"get_all_free_blocks() gives {found}, the links {order}"
    walk = getattr(queue, "iter_blocks_after", None)
    if walk is None:
        return None
    starts = [("None", None, order)]
    if order:  # and after the middle block, reached by the links walked above
        middle, cursor = len(order) // 2, queue.fake_free_list_head.next_free_block
        for _ in range(middle):
            cursor = cursor.next_free_block
        starts.append((f"block {order[middle]}", cursor, order[middle + 1:]))
    for name, start, expected in starts:
        found = list(map(int, map(_BLOCK_ID, islice(walk(start), len(order) + 1))))  # no cycle
        if found != expected:
            return f"iter_blocks_after({name}) gives {found}, the links {expected}"
    return None


class BlockPoolDriver(PoolReader):
    def __init__(self, cls, blocks: int, caching: bool, hash_block_size: int = 16,
                 events: bool = False, lookahead: int = 0, metrics: bool = False):
        # keywords a release before the KV events took no: given only where they differ
        more = {"enable_kv_cache_events": True} if events else {}
        more |= {"num_hash_lookahead_tokens": lookahead} if lookahead else {}
        if metrics:  # a collector that samples every block: what it tracks is then exact
            from vllm.v1.core.kv_cache_metrics import KVCacheMetricsCollector

            more["metrics_collector"] = KVCacheMetricsCollector(sample_rate=1.0)
        super().__init__(cls(num_gpu_blocks=blocks, enable_caching=caching,
                             hash_block_size=hash_block_size, **more), blocks)
        self.hash_block_size = hash_block_size
        self.heard: list[int] = []
        self.events: list = []  # what the last call published (taken from the pool after it)
        self.evictions: list[int] = []  # the reuse gaps of each block the call stopped tracking

    def _blocks(self, ids) -> list:
        return [self.pool.blocks[i] for i in ids]

    def _heard(self, block) -> None:
        self.heard.append(int(block.block_id))

    def _request(self, prompt):
        return request(prompt)

    def _done(self, result=None):
        """`result`, after taking what the call published (a pool without KV events, e.g. one
        of an older release, publishes nothing)."""
        take = getattr(self.pool, "take_events", None)
        self.events = plain_events(take()) if take is not None else []
        collector = getattr(self.pool, "metrics_collector", None)
        self.evictions = [len(event.reuse_gaps_seconds) for event in
                          collector.drain_events()] if collector is not None else []
        return result

    def get_new_blocks(self, count: int) -> list[int]:
        self.heard = []
        blocks = self.pool.get_new_blocks(count)
        return self._done([int(block.block_id) for block in blocks])

    def touch(self, ids) -> None:
        self.heard = []
        self._done(self.pool.touch(self._blocks(ids)))

    def free_blocks(self, ids) -> None:
        self.heard = []
        self._done(self.pool.free_blocks(self._blocks(ids)))

    def unpin_blocks(self, ids) -> None:
        self.heard = []
        self._done(self.pool.unpin_blocks(self._blocks(ids), self._heard))

    def cache_full_blocks(self, prompt, ids, num_cached: int, num_full: int, group: int,
                          block_size: int, skip=()) -> None:
        """`prompt`: the request's hashes, tokens and salt (`events.Prompt`)."""
        self.heard = []
        # block_mask only when a position is skipped: a release before it has no such argument
        mask = {} if not skip else {"block_mask": [i not in skip
                                                   for i in range(num_full - num_cached)]}
        self._done(self.pool.cache_full_blocks(self._request(prompt), self._blocks(ids),
                                               num_cached, num_full, block_size, group, **mask))

    def cache_partial_block(self, prompt, block: int, units: int, group: int, block_size: int,
                            replace: bool = False):
        self.heard = []
        more = {"replace_existing_hashes": True} if replace else {}  # (not before vLLM 0.30)
        key = self.pool.cache_partial_block(self._request(prompt), self.pool.blocks[block],
                                            units * self.hash_block_size, group, block_size,
                                            **more)
        return self._done(None if key is None else self.decode_key(key))

    def emit_cached_block_events(self, prompt, num_blocks: int, block_size: int,
                                 group: int) -> None:
        self.heard = []
        self._done(self.pool.emit_cached_block_events(self._request(prompt), num_blocks,
                                                      block_size, group))

    def move_block_hashes(self, src: int, dst: int) -> None:
        self.heard = []
        self._done(self.pool.move_block_hashes(self.pool.blocks[src], self.pool.blocks[dst]))

    def get_cached_block(self, block_hash: int, groups) -> list[int] | None:
        self.heard = []
        found = self.pool.get_cached_block(hash_bytes(block_hash), list(groups))
        return self._done(None if found is None else [int(block.block_id) for block in found])

    def evict_blocks(self, ids) -> None:
        self.heard = []
        self._done(self.pool.evict_blocks(set(ids)))

    def reset_prefix_cache(self):
        self.heard = []
        return self._done(self.pool.reset_prefix_cache())
