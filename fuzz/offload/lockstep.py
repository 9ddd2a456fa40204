"""The offload judge on the shared lock step (`kvfuzz.fuzz.engine.lockstep`): the oracle
(`oracle.offload`) and an implementation driven as vLLM's offloading connector drives its
manager (requests' lookups, loads and stores, transfers completed later or failed, events taken,
resets), compared call by call (every result) and after every op: keys completed are found and
keys failed are not (`findable`), the manager's counts against its own cache (`sizes`), the
policy's memory bounded by the pool (`policy_memory`), every key's reference count, the chunk
each key sits on, the policy's order, `get_stats()`. A store's
evictions are checked against the transfers in flight and the keys offered (`evictions`), its
chunks against those in use; a load's chunks against what the store wrote; the events against
the cache (`announced`): the properties of `checks.py`, which ask nothing of the oracle.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, Lockstep, crash_problems, handles, list_diff, short
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.fuzz.offload import checks
from kvfuzz.fuzz.offload.counting import EVENTS, Counting
from kvfuzz.oracle.offload.contract import CURRENT
from kvfuzz.oracle.offload.model import HIT_PENDING, MISS, OffloadModel
from kvfuzz.strategies.offload import trace as offload
from kvfuzz.strategies.offload.trace import (CompleteLoad, CompleteStore, Events, Finish, Load,
                                             Lookup, New, Reset, Store, Touch, position,
                                             request_keys)


class _Request:
    def __init__(self, keys_of):
        self.keys_of = keys_of          # keys_of(start, stop): the request's keys, by group
        self.finished = False
        self.stores: list[list] = []    # transfers in flight, oldest first
        self.loads: list[list] = []


class OffloadLockstep(Counting, Lockstep):
    KINDS = offload.KINDS
    EVENTS = EVENTS

    def build_model(self, trace):
        self.requests: dict[int, _Request] = {}
        self.held: dict = {}         # key -> the chunk the implementation said it writes to
        self.stored: set = set()     # completed, not evicted or reset since (as it said)
        # failed, not offered and taken since: the latest ones, at most one pool's worth (each
        # op probes them; lookups check any failed key they meet all the same)
        self.failed: dict = {}
        self.published: set = set()  # stored, as the events told (cleared by a reset)
        self.evicted: set = set()    # ever evicted
        return OffloadModel(trace.policy, trace.chunks, trace.events, trace.store_threshold,
                            trace.tracker_size, self.options.get("contract", CURRENT))

    def build_impl(self, trace, cls, device, contract=None):
        from kvfuzz.impl.offload.driver import OffloadDriver  # imports vLLM

        return make(OffloadDriver, cls, trace.policy, trace.chunks, trace.events,
                    trace.store_threshold, trace.tracker_size)

    def initial_problems(self):
        return self.state(None)

    def _active(self, rid: int) -> _Request | None:
        request = self.requests.get(rid)
        return request if request is not None and not request.finished else None

    def _in_flight(self, kind: str) -> set:
        return {key for r in self.requests.values() for job in getattr(r, kind) for key in job}

    @handles(New)
    def new(self, op: New):
        if op.rid in self.requests:
            return
        groups, size = self.trace.groups, len(op.hashes)
        keys = request_keys(op.hashes, groups, 0, size)
        where = [position(i) for _ in range(groups) for i in range(size)] if op.positioned \
            else None
        self.count_new(op)
        yield Call(f"on_new_request(r{op.rid}, {len(keys)} keys)", "new_request",
                   (op.rid, keys, where), compared=True)
        self.requests[op.rid] = _Request(lambda a, b: request_keys(op.hashes, groups, a, b))

    def _lookups(self, rid: int, request: _Request, start: int, stop: int):
        """The connector's prefix lookups: per group, up to its first miss. The keys asked, and
        per group the keys that hit (pending or not)."""
        asked, hits = [], []
        for group in range(self.trace.groups):
            keys = [k for k in request.keys_of(start, stop) if k[1] == group]
            answers = self.model.lookup(rid, keys)
            hit = next((i for i, a in enumerate(answers) if a == MISS), len(keys))
            asked += keys[:hit + 1]
            hits.append(keys[:hit])
        return asked, hits

    def _lookup_call(self, rid: int, keys) -> Call:
        def compare(expected, rejected, actual, raised):
            if raised is not None:
                return crash_problems(raised)
            answers = actual.split()
            found = checks.findable(self.stored, self.failed, dict(zip(keys, answers)))
            return found + ([("result", f"lookup: {list_diff(expected, answers)}")]
                            if expected != answers else [])
        self.count_lookups(keys, self.evicted)
        return Call(f"lookup x{len(keys)}", "lookup", (rid, keys), compare=compare,
                    oracle=lambda: self.model.looked_up(rid, keys))

    @handles(Lookup)
    def lookup(self, op: Lookup):
        request = self._active(op.rid)
        asked = self._lookups(op.rid, request, op.start, op.stop)[0] if request else []
        if asked:
            yield self._lookup_call(op.rid, asked)

    @handles(Load)
    def load(self, op: Load):
        request = self._active(op.rid)
        if request is None:
            return
        asked, hits = self._lookups(op.rid, request, op.start, op.stop)
        if not asked:
            return
        yield self._lookup_call(op.rid, asked)
        n = min(len(keys) for keys in hits)
        keys = [k for group in hits for k in group[:n]]
        pending = any(a == HIT_PENDING for a in self.model.lookup(op.rid, keys))
        self.count_load(keys, pending)
        if not keys or pending:
            return  # nothing to load, or the request waits for a store in flight
        yield Call(f"prepare_load(r{op.rid}, {short(keys, 60)})", "prepare_load",
                   (op.rid, keys), compare=self._checked(
                       lambda chunks: checks.loaded_chunks(keys, chunks, self.held)))
        request.loads.append(keys)

    @handles(Store)
    def store(self, op: Store):
        request = self._active(op.rid)
        keys = request.keys_of(op.start, op.stop) if request else []
        if not keys:
            return
        before = self.snapshot(keys, self._in_flight("stores"))
        result = yield Call(f"prepare_store(r{op.rid}, {short(keys, 60)})", "prepare_store",
                            (op.rid, keys), compare=self._store_compare(keys))
        self.count_store(before, result.expected)
        if result.actual is None:
            return
        to_store, evicted, chunks = _store_result(result.actual)
        for key in evicted:
            self.stored.discard(key)
            self.held.pop(key, None)
        self.evicted.update(evicted)
        self.held.update(zip(to_store, chunks))
        for key in to_store:
            self.failed.pop(key, None)
        if to_store:
            request.stores.append(list(to_store))

    def _store_compare(self, keys):
        def compare(expected, rejected, actual, raised):
            if raised is not None:
                return crash_problems(raised)
            problems, actual = [], _store_result(actual)
            if actual is not None:  # what it did, judged before what the oracle says
                to_store, evicted, chunks = actual
                problems += checks.evictions(evicted, set(keys), self._in_flight("loads"),
                                             self._in_flight("stores"), set(self.held))
                held = {k: c for k, c in self.held.items() if k not in evicted}
                problems += checks.new_chunks(to_store, chunks, held, self.trace.chunks)
            if actual is None or expected is None:
                return problems + ([] if actual == expected else [
                    ("None vs success", f"prepare_store: expected {short(expected)}, actual "
                                        f"{short(actual and actual[:2])}")])
            return problems + checks.views(
                {"keys to store": expected[0], "evicted": expected[1]},
                {"keys to store": actual[0], "evicted": actual[1]}, "result")
        return compare

    @staticmethod
    def _checked(check):
        """A call whose result the oracle does not give (chunks): `check(actual)` judges it."""
        def compare(expected, rejected, actual, raised):
            return crash_problems(raised) if raised is not None else check(actual)
        return compare

    @handles(Touch)
    def touch(self, op: Touch):
        request = self._active(op.rid)
        keys = request.keys_of(op.start, op.stop) if request else []
        if keys:
            self.count_touch(keys)
            yield Call(f"touch(r{op.rid}, {short(keys, 60)})", "touch", (op.rid, keys))

    def _oldest(self, rid: int, kind: str) -> list | None:
        """The keys of request `rid`'s oldest transfer in flight of `kind` ("stores", "loads"),
        taken off its list; None when it has none."""
        jobs = getattr(self.requests.get(rid), kind, None)
        return jobs.pop(0) if jobs else None

    @handles(CompleteStore)
    def complete_store(self, op: CompleteStore):
        keys = self._oldest(op.rid, "stores")
        if keys is None:
            return
        self.count("store completes" if op.success else "store fails")
        yield Call(f"complete_store(r{op.rid}, {short(keys, 60)}, success={op.success})",
                   "complete_store", (op.rid, keys, op.success))
        if op.success:
            self.stored.update(keys)
        else:
            for key in keys:
                self.held.pop(key, None)
                self.failed[key] = None
            while len(self.failed) > max(self.trace.chunks, 64):
                del self.failed[next(iter(self.failed))]

    @handles(CompleteLoad)
    def complete_load(self, op: CompleteLoad):
        keys = self._oldest(op.rid, "loads")
        if keys is None:
            return
        self.count("load completes")
        yield Call(f"complete_load(r{op.rid}, {short(keys, 60)})", "complete_load",
                   (op.rid, keys))

    @handles(Finish)
    def finish_request(self, op: Finish):
        request = self.requests.get(op.rid)
        if request is None:
            return
        self.count("finish again" if request.finished else "finish with transfers in flight"
                   if request.stores or request.loads else "finish")
        yield Call(f"on_request_finished(r{op.rid})", "finish", (op.rid,))
        request.finished = True

    @handles(Events)
    def take_events(self, op: Events):
        # The cache as the implementation holds it, read before the events are taken (taking
        # them changes no chunk): what the events must have announced.
        contents = checks.entries_of((yield Call("", "contents", oracle=None)).actual)
        ready = {key for key, ref, _ in contents if ref >= 0}
        yield Call("take_events()", "take_events", compare=self._events_compare(ready))

    def _events_compare(self, ready: set):
        def compare(expected, rejected, actual, raised):
            if raised is not None:
                return crash_problems(raised)
            taken = [(checks.event_kind(*e[:3]), checks.keys_of(e[3])) for e in actual]
            self.count_events(taken)
            problems = []
            if self.trace.events:
                self.published, problems = checks.announced(self.published, taken, ready)
            return problems + ([("result", f"take_events: {list_diff(expected, taken)}")]
                               if expected != taken else [])
        return compare

    @handles(Reset)
    def reset(self, op: Reset):
        in_flight = any(r.stores or r.loads for r in self.requests.values())
        self.count("reset with transfers in flight" if in_flight else "reset")
        yield Call("reset_cache()", "reset")
        for request in self.requests.values():  # stale: the connector never completes them
            request.stores.clear()
            request.loads.clear()
        self.stored.clear()
        self.held.clear()
        self.published.clear()  # the engine's AllBlocksCleared

    def state(self, op):
        model = self.model
        state = checks.state_of(self.read("state"))
        contents = state["contents"]
        known = sorted(self.stored | set(self.failed))
        answers = dict(zip(known, self.read("probe", known).split())) if known else {}
        problems = checks.findable(self.stored, self.failed, answers)
        problems += checks.sizes(state["sizes"], contents, self.trace.chunks)
        problems += checks.contents(dict(model.contents()),
                                    {tuple(key): ref for key, ref, _ in contents})
        problems += checks.chunk_map(contents, self.held)
        expected = model.policy.view()
        if "order" not in state["policy"] and "evictable" in state["policy"]:
            # an LRU policy without ranks (vLLM before 0.30): its recency order is not
            # 0.33's, which the model follows; the evictable keys are still compared
            expected.pop("order", None)
        ghosts = {name: keys for name, keys in state["policy"].items() if name in ("b1", "b2")}
        problems += checks.policy_memory(state["records"], contents, ghosts, self.trace.chunks)
        problems += checks.views(expected, state["policy"], "policy order")
        if model.contract.stats:  # (no get_stats before vLLM 0.24: declared, not read)
            problems += checks.views(checks.as_read(model.stats(), state["stats"]),
                                     state["stats"], "usage")
        return problems


def _store_result(actual):
    """prepare_store's answer with its keys as pairs (None stays None)."""
    if actual is None:
        return None
    to_store, evicted, chunks = actual
    return checks.keys_of(to_store), checks.keys_of(evicted), chunks
