"""What the offload lock step counts (its EVENTS): the edge classes of the summary grid and the
atheris features, read from the oracle's state around each call."""

from __future__ import annotations

from kvfuzz.oracle.offload.model import FAILED, HIT, HIT_PENDING, MISS, REMOVED, STORED

EVENTS = (
    "new request", "request without positions", "two groups", "pool of no chunks",
    "lookup hit", "lookup miss", "lookup of a chunk being stored", "lookup of an evicted chunk",
    "load", "load of a chunk another load reads", "load waits for a store in flight",
    "load: nothing cached", "load completes",
    "store", "store of nothing new", "store of a stored chunk",
    "store of a chunk another request is storing", "store fills the pool exactly",
    "store evicts", "store refused: too few evictable", "store refused: everything in flight",
    "store skipped by the threshold", "threshold tracker full", "store completes", "store fails",
    "touch", "touch again", "touch of a chunk not in the cache",
    "finish", "finish with transfers in flight", "finish again",
    "events", "events: stored", "events: eviction", "events: failed store",
    "reset", "reset with transfers in flight",
    "ARC ghost hit", "ARC evicts from T2")


class Counting:
    """Counting helpers of the offload lock step (`self.count`, `self.model`, `self.trace`)."""

    last_touch: list | None = None

    def count_new(self, op) -> None:
        self.count("new request")
        if not op.positioned:
            self.count("request without positions")
        if self.trace.groups > 1:
            self.count("two groups")
        if self.trace.chunks == 0:
            self.count("pool of no chunks")

    def count_lookups(self, keys, evicted: set) -> None:
        answers = self.model.lookup(0, keys)
        for answer, name in ((HIT, "lookup hit"), (MISS, "lookup miss"),
                             (HIT_PENDING, "lookup of a chunk being stored")):
            if answer in answers:
                self.count(name)
        if any(a == MISS and k in evicted for k, a in zip(keys, answers)):
            self.count("lookup of an evicted chunk")

    def count_load(self, keys, pending: bool) -> None:
        if pending:
            self.count("load waits for a store in flight")
        elif not keys:
            self.count("load: nothing cached")
        else:
            self.count("load")
            if any(self.model.ref[k] > 0 for k in keys):
                self.count("load of a chunk another load reads")

    def snapshot(self, keys, storing: set) -> dict:
        """What decides a store's edge class, before it."""
        model, ref = self.model, self.model.ref
        policy = model.policy
        ghosts = set(getattr(policy, "b1", ())) | set(getattr(policy, "b2", ()))
        return {"free": model.chunks - len(ref),
                "evictable": sum(count == 0 for count in ref.values()),
                "stored": any(ref.get(k, -1) >= 0 for k in keys),
                "storing": any(k in storing for k in keys),
                "ghost": any(k in ghosts for k in keys if k not in ref),
                "t2": set(getattr(policy, "t2", ())), "skipped": model.skipped,
                "tracker full": model.offers is not None
                and len(model.offers) >= model.tracker_size}

    def count_store(self, before: dict, expected) -> None:
        self.count("store")
        for name in ("stored", "storing"):
            if before[name]:
                self.count({"stored": "store of a stored chunk",
                            "storing": "store of a chunk another request is storing"}[name])
        if before["tracker full"]:
            self.count("threshold tracker full")
        if self.model.skipped > before["skipped"]:
            self.count("store skipped by the threshold")
        if before["ghost"]:
            self.count("ARC ghost hit")
        if expected is None:
            self.count("store refused: too few evictable" if before["evictable"]
                       else "store refused: everything in flight")
            return
        new, evicted = expected
        if not new:
            self.count("store of nothing new")
        elif evicted:
            self.count("store evicts")
            if any(k in before["t2"] for k in evicted):
                self.count("ARC evicts from T2")
        elif len(new) == before["free"]:
            self.count("store fills the pool exactly")

    def count_touch(self, keys) -> None:
        self.count("touch again" if keys == self.last_touch else "touch")
        self.last_touch = keys
        if any(k not in self.model.ref for k in keys):
            self.count("touch of a chunk not in the cache")

    def count_events(self, taken) -> None:
        self.count("events")
        kinds = {kind for kind, _ in taken}
        for kind, name in ((STORED, "events: stored"), (REMOVED, "events: eviction"),
                           (FAILED, "events: failed store")):
            if kind in kinds:
                self.count(name)
