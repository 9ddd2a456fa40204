"""Calls an offloading manager with vLLM `CPUOffloadingManager`'s interface (vllm 0.33.0) in plain
data: a key (hash, group) goes in as vLLM's `OffloadKey` (8 hash bytes, 4 group bytes), each
request as a `ReqContext` with its keys' positions, every call inside the manager's `lock` (as
its callers must); results, events and state come out flat: keys as [hash, group, hash, group,
...] int lists, lookup answers as one string of names (the worker checks each value of a list
that is not all ints, one by one: with keys as tuples, those checks took longer than the trace).

The state is read the way a debugger would, from the structures vLLM's policies declare: the
LRU policy's chunks and ranks, the ARC policy's T1, T2, B1, B2 and target; every key the policy
keeps a record for (its memory); the manager's free, evictable and write-pending counts;
`get_stats()` turned back into counts.

Earlier releases' API is read from the class, not a version table: vLLM 0.20 keeps the base
classes in `abstract.py` (`base.py` after), its `ReqContext` has no `req_id` (before 0.22), its
`touch`, `complete_load` and `complete_store` take no request context; the constructor takes no
`store_threshold` before 0.22; there is no `on_new_request` / `on_request_finished` before 0.23
(the connector told the manager nothing), no `get_stats` and no evictable count before 0.24."""

from __future__ import annotations

import contextlib

from kvfuzz.impl.offload.release_api import (base_module, constructor_keywords,
                                             request_context, takes_context)

USAGE, WRITE_USAGE, READ_USAGE, ALLOCATIONS, SKIPPED = (
    "vllm:kv_offload_cpu_cache_usage_perc", "vllm:kv_offload_cpu_cache_write_usage_perc",
    "vllm:kv_offload_cpu_cache_read_usage_perc", "vllm:kv_offload_cpu_allocation_size",
    "vllm:kv_offload_stores_skipped")


def offload_key(key) -> bytes:
    hash_, group = key
    return hash_.to_bytes(8, "big") + group.to_bytes(4, "big")


def answer_name(answer) -> str:
    """A lookup's answer by `LookupResult`'s name; before vLLM 0.25 it was True (a hit), None
    (being stored: "retry later") or False (a miss)."""
    named = {True: "HIT", None: "HIT_PENDING", False: "MISS"}
    return named[answer] if answer is None or isinstance(answer, bool) else str(answer.name)


def plain_key(raw) -> tuple[int, int]:
    raw = bytes(raw)
    return int.from_bytes(raw[:-4], "big"), int.from_bytes(raw[-4:], "big")


class OffloadDriver:
    def __init__(self, cls, policy: str, chunks: int, events: bool, store_threshold: int,
                 tracker_size: int):
        self.base = base_module()
        self.chunks = chunks
        self.manager = cls(**constructor_keywords(cls, chunks, policy, events, store_threshold,
                                                  tracker_size))
        # the methods that take the request's context (all but lookup's and prepare_*'s
        # before vLLM 0.21)
        self.with_context = {name for name in ("touch", "complete_load", "complete_store")
                             if takes_context(getattr(self.manager, name))}
        # vLLM before 0.30 counts blocks where 0.33 counts chunks: the same pool, other names
        self.unit = "chunk" if hasattr(self.manager, "_num_chunks") else "block"
        # the manager's lock, which its callers hold; none before vLLM 0.30 (nothing to hold)
        self.lock = getattr(self.manager, "lock", None) or contextlib.nullcontext()
        self.contexts: dict = {None: request_context(self.base, "kvfuzz-probe")}
        self.plain: dict = {}  # vLLM's key -> (hash, group): every read goes through them all

    def _call(self, method: str, *args):
        with self.lock:
            return getattr(self.manager, method)(*args)

    def _with(self, method: str, keys, rid, *more):
        """`method(keys[, context], *more)`, the context where the method takes one."""
        context = (self.contexts[rid],) if method in self.with_context else ()
        return self._call(method, [offload_key(k) for k in keys], *context, *more)

    def new_request(self, rid: int, keys, positions) -> str | None:
        """The request's offloading policy by 0.33's names; None where the manager is told
        nothing of a request (vLLM before 0.23: the connector made its context alone)."""
        context = self.contexts[rid] = request_context(self.base, f"r{rid}")
        if not callable(getattr(self.manager, "on_new_request", None)):
            return None
        place = getattr(context, "set_offload_key_position", None)  # (not before vLLM 0.30:
        for key, where in zip(keys, (positions or ()) if place else ()):  # no positions)
            place(offload_key(key), where)
        policy = str(self._call("on_new_request", context).policy.value)
        return "chunk_level" if policy == "block_level" else policy  # its name before vLLM 0.30

    def lookup(self, rid: int, keys) -> str:
        """The answers' names, space-separated."""
        context, lookup = self.contexts[rid], self.manager.lookup
        with self.lock:  # held across them, as the connector holds it
            return " ".join(answer_name(lookup(offload_key(k), context)) for k in keys)

    def probe(self, keys) -> str:
        """Lookups outside any request: whether the caller can find what it stored. A probe
        changes nothing it reads: where a lookup counts towards the store threshold (vLLM
        0.24-0.28), the counts are put back as they were."""
        counts = getattr(self.manager, "counts", None)
        kept = None if counts is None else counts.copy()
        try:
            return self.lookup(None, keys)
        finally:
            if kept is not None:
                self.manager.counts = kept

    def prepare_load(self, rid: int, keys) -> list[int]:
        spec = self._call("prepare_load", [offload_key(k) for k in keys], self.contexts[rid])
        return [int(chunk) for chunk in spec.block_ids.tolist()]

    def touch(self, rid: int, keys) -> None:
        self._with("touch", keys, rid)

    def complete_load(self, rid: int, keys) -> None:
        self._with("complete_load", keys, rid)

    def prepare_store(self, rid: int, keys):
        """None, or (keys to store, keys evicted, the chunk each key to store is written to)."""
        out = self._call("prepare_store", [offload_key(k) for k in keys], self.contexts[rid])
        if out is None:
            return None
        return (self.flat_keys(out.keys_to_store), self.flat_keys(out.evicted_keys),
                [int(chunk) for chunk in out.store_spec.block_ids.tolist()])

    def complete_store(self, rid: int, keys, success: bool = True) -> None:
        self._with("complete_store", keys, rid, success)

    def finish(self, rid: int) -> None:
        if callable(getattr(self.manager, "on_request_finished", None)):  # (none before 0.23:
            self._call("on_request_finished", self.contexts[rid])       # nothing was called)

    def take_events(self) -> list[tuple[bool, bool, str, list]]:
        """(removed, metadata only, medium, keys) of each event, drained at once (the manager's
        is a generator)."""
        with self.lock:
            events = list(self.manager.take_events())
        # (vLLM 0.25: the medium a string, no metadata-only events)
        return [(bool(e.removed), bool(getattr(e, "metadata_only", False)),
                 str(getattr(e.medium, "value", e.medium)), self.flat_keys(e.keys))
                for e in events]

    def reset(self) -> None:
        self._call("reset_cache")

    def _pair(self, raw) -> tuple[int, int]:
        pair = self.plain.get(raw)
        if pair is None:
            pair = self.plain[raw] = plain_key(raw)
        return pair

    def flat_keys(self, raws) -> list[int]:
        """[hash, group, hash, group, ...] of vLLM's keys."""
        flat = []
        for raw in raws:
            flat += self._pair(raw)
        return flat

    # -- state, read from the structures ------------------------------------------------------
    def state(self) -> tuple:
        """Everything read after an op, as one answer of a few flat lists (the worker checks
        every value it is sent, one by one inside a list of anything but ints):
        (contents, the policy's list names, those lists, ARC's target or None, [free,
        evictable, writing] counts, [pinned, writing, used, skipped or -1] from get_stats(),
        the allocation sizes get_stats() reports, the keys the policy keeps a record for)."""
        view = self.policy_view()
        target = view.pop("target", None)
        sizes, stats = self.sizes(), self.stats()
        return (self.contents(), " ".join(view), list(view.values()), target,
                [sizes["free"], sizes["evictable"], sizes["writing"]],
                [stats["pinned"], stats["writing"], stats.get("used", -1),
                 stats.get("skipped", -1)], stats["allocations"], self.records())

    def _policy(self):
        return self.manager._policy

    def contents(self) -> list[int]:
        """[hash, group, reference count, chunk, ...] of every key in the cache."""
        policy = self._policy()
        if hasattr(policy, "t1"):
            items = [*policy.t1.items(), *policy.t2.items()]
        else:
            items = list(getattr(policy, f"{self.unit}s").items())
        flat, where = [], f"{self.unit}_id"
        for key, chunk in items:
            flat += (*self._pair(key), int(chunk.ref_cnt), int(getattr(chunk, where)))
        return flat

    def policy_view(self) -> dict:
        policy = self._policy()
        if hasattr(policy, "t1"):
            return {"t1": self.flat_keys(policy.t1), "t2": self.flat_keys(policy.t2),
                    "b1": self.flat_keys(policy.b1), "b2": self.flat_keys(policy.b2),
                    "target": float(policy.target_t1_size)}
        if not hasattr(policy, "_ranks") and hasattr(policy, f"evictable_{self.unit}s"):
            # vLLM 0.24-0.30: a recency list of the evictable chunks, least recent first, no
            # ranks (oracle/offload/lru_recency.py)
            return {"evictable": self.flat_keys(getattr(policy, f"evictable_{self.unit}s"))}
        if not hasattr(policy, "_ranks"):  # vLLM before 0.24: every block in one ordered
            # dict, least recent first (oracle/offload/lru_insertion.py)
            return {"order": self.flat_keys(getattr(policy, f"{self.unit}s"))}
        ranks = policy._ranks
        order = sorted((_rank(ranks[k]), bytes(k)) for k in policy.chunks)
        return {"order": self.flat_keys(k for _, k in order),
                "evictable": self.flat_keys(sorted(bytes(k) for k in policy._evictable))}

    def records(self) -> list[int]:
        """Every key the policy keeps a record for outside its ghost lists (LRU: a chunk, a rank,
        a place among the evictable; ARC: T1 and T2), each once, in key order."""
        policy = self._policy()
        if hasattr(policy, "t1"):
            kept = {*policy.t1, *policy.t2}
        else:
            # (an LRU policy of vLLM before 0.31 has no ranks; before 0.30 its chunks were
            # blocks)
            kept = {*getattr(policy, f"{self.unit}s"), *getattr(policy, "_ranks", ()),
                    *getattr(policy, "_evictable", ())}
        return self.flat_keys(sorted(bytes(k) for k in kept))

    def sizes(self) -> dict:
        manager = self.manager
        unit = self.unit
        evictable = getattr(manager, f"_num_evictable_cache_{unit}s", None)  # (None: no such
        # count before vLLM 0.24, not compared)
        return {"free": int(getattr(manager, f"_get_num_free_{unit}s")()),
                "evictable": None if evictable is None else int(evictable),
                "writing": self.writing()}

    def writing(self) -> int:
        """Blocks with a store in flight: the manager's count, or, where it keeps none (vLLM
        0.25), those the policy holds at reference count -1 (a store not yet completed)."""
        count = getattr(self.manager, f"_num_write_pending_{self.unit}s", None)
        if count is not None:
            return int(count)
        return sum(1 for ref in self.contents()[2::4] if ref < 0)

    def stats(self) -> dict:
        """`get_stats()` in counts (its gauges are fractions of the pool); nothing read where
        the manager has none (vLLM before 0.24: declared, the judge compares none)."""
        if not callable(getattr(self.manager, "get_stats", None)):
            return {"pinned": -1, "writing": -1, "allocations": None, "used": -1}
        with self.lock:
            stats = self.manager.get_stats()
        # the value section: `metric_sections()`, or the `_values` it wraps (vLLM before 0.30)
        values = stats.metric_sections()[1] if hasattr(stats, "metric_sections") else \
            stats._values

        def count(name: str) -> int | float:
            # A gauge is a fraction of the pool; a pool of no chunks uses nothing, so its gauge
            # is passed on as it is (0.0 equals the count 0, anything else shows).
            value = values[name][()]
            return round(value * self.chunks) if self.chunks else value
        if READ_USAGE not in values:  # vLLM 0.25: the usage gauge alone (no read or write
            # gauge, no allocation sizes): those parts are not read (-1, None: not compared)
            found = {"pinned": -1, "writing": -1, "allocations": None, "used": count(USAGE)}
        else:
            found = {"pinned": count(READ_USAGE), "writing": count(WRITE_USAGE),
                     "allocations": [int(n) for n in values.get(ALLOCATIONS, {}).get((), [])]}
        if count(USAGE) != found["pinned"] + found["writing"]:
            found["used"] = count(USAGE)  # shows only when the three gauges disagree
        if SKIPPED in values:
            found["skipped"] = int(values[SKIPPED].get((), 0))
        return found


def _rank(rank) -> tuple:
    """A chunk's rank as 0.33 keeps it, (request rank, -position); vLLM 0.31 and 0.32 rank by
    recency alone, one int a key, which 0.33 writes (rank, 0) for a key without a position."""
    return (rank, 0) if isinstance(rank, int) else tuple(rank)
