"""The unified judge for a cache with HiCache's host tier ("full+host" traces, `unified-host/1`:
tree ops, over `impl/unified/host_tier.py`'s driver). It keeps no model of the tree: after every
op it reads the tree (every node's Full device and host slots, locks) and checks what the host
tier promises (`oracle.unified.host`), with the read before the op for what an op must do:

    Insert(tokens)   slots for the key's pages (the shortfall evicted: write-back backups),
                     then `insert`
    Match(tokens)    `match_prefix`, its host hit loaded back (`load_back`, `loading_check`):
                     the hits against the tree read before, the device hit after the load
    Touch(tokens)    a storage prefetch of the key's miss (a stand-in storage holding every
                     key): `insert_host` under the match's last host node, host pressure
                     first where the host pool is short
    Pin(tokens)      a host lock on the match's deepest node, `evict_host(len(tokens))` while
                     it is held: the node keeps its host copy
    Evict(count)     `evict_for_alloc(count)` (relative: everything evictable, plus count)
    Reset()          the scheduler's flush

After every op: both pools accounted (no slot twice, none lost), the Full sizes, no lock left,
no node with neither tier, no device node under a parent that is not on the device. With the
Rust core the driver runs the Python core beside it (`impl/unified/host_tier.py`): the checks
read the Python core's nodes, and the Rust core must answer every call alike and hold both
pools in the same order."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, Lockstep, handles, short
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.fuzz.radix.lockstep import rows_needed
from kvfuzz.fuzz.unified.lockstep import PYTHON, RUST, core_problems, describe_core
from kvfuzz.oracle.unified import host
from kvfuzz.strategies.radix.trace import NAMES, Evict, Insert, Match, Pin, Reset, Touch
from kvfuzz.strategies.unified.trace import TREE_OPS

LOADED, REFUSED, RECLAIMED, DROPPED, DEMOTED, PREFETCHED = (
    "host load-back", "host load-back refused", "host duplicate reclaimed",
    "host sole copy evicted", "host demotion", "host prefetch inserted")


def _ns(ns: int):
    return None if not ns else f"ns{ns}"


class HostLockstep(Lockstep):
    KINDS = {NAMES[kind]: kind for kind in TREE_OPS}
    EVENTS = ("insert", "match", "host prefetch", "host pin", "evict", "reset", RUST, PYTHON,
              LOADED, REFUSED, RECLAIMED, DROPPED, DEMOTED, PREFETCHED)

    def build_model(self, trace):
        self.before = None
        self.pending = None  # a host lock's pressure (Pin), judged in `state`
        self.fetched = None  # a storage prefetch (Touch), judged in `state`
        return None  # no model: the checks read the tree (oracle.unified.host)

    def build_impl(self, trace, cls, device, core: str | None = None, **_):
        from kvfuzz.impl.unified.host_tier import HostDriver  # imports torch and SGLang

        rows, context = rows_needed(trace)
        return make(HostDriver, cls, trace.page_size, trace.size, trace.policy, trace.events,
                    rows, context, device, False, core, trace.host_size,
                    getattr(trace, "host_policy", "write_back"))

    def initial_problems(self):
        self.core = self.read("core")
        self.count(RUST if self.core["rust"] else PYTHON)
        problems = core_problems(self.core)
        if not problems:
            self.before = self.read("host_state")
        return problems

    def _key(self, tokens) -> list:
        page = self.trace.page_size
        return list(tokens)[:len(tokens) // page * page]

    # -- ops ------------------------------------------------------------------------------------
    @handles(Insert)
    def insert(self, op):
        self.count("insert")
        yield Call(f"insert({short(list(op.tokens), 40)})", "host_insert", (op.tokens, op.ns),
                   oracle=None)

    @handles(Match)
    def match(self, op):
        self.count("match")
        key = self._key(op.tokens)
        got = yield Call(f"match({short(key, 40)})", "host_match", (op.tokens, op.ns, True),
                         oracle=None)
        if got.actual[1]:
            self.count(LOADED if got.actual[2] else REFUSED)
        return host.match_problems(self.before, _ns(op.ns), key, self.trace.page_size,
                                   got.actual)

    @handles(Touch)
    def prefetch(self, op):
        self.count("host prefetch")
        key = self._key(op.tokens)
        got = yield Call(f"prefetch({short(key, 40)})", "host_prefetch", (op.tokens, op.ns),
                         oracle=None)
        if got.actual[2] > 0:
            self.count(PREFETCHED)
        self.fetched = (_ns(op.ns), key, got.actual)

    @handles(Pin)
    def pin(self, op):
        self.count("host pin")
        key, asked = self._key(op.tokens), len(op.tokens)
        got = yield Call(f"host lock({short(key, 30)}) + evict_host({asked})", "host_pin",
                         (op.tokens, op.ns, asked), oracle=None)
        problems = host.host_lock_problems(got.actual)
        if got.actual[0]:
            self.pending = (asked, got.actual[3], (_ns(op.ns), tuple(key[:got.actual[0]])))
        return problems

    @handles(Evict)
    def evict(self, op):
        self.count("evict")
        count = op.count
        if op.relative:
            count = max(0, self.before["evictable"] + op.count)
        if count <= 0:
            return
        yield Call(f"evict_for_alloc({count})", "host_evict", (count,), oracle=None)

    @handles(Reset)
    def reset(self, op):
        self.count("reset")
        yield Call("reset()", "reset", (), oracle=None)

    # -- after every op -------------------------------------------------------------------------
    def state(self, op):
        after = self.read("host_state")
        problems = host.twin_problems(after["cores"]) if "cores" in after else []
        problems = problems or host.accounting_problems(after) + host.tier_problems(after)
        pending, self.pending = self.pending, None
        if pending is not None and not problems:
            problems = host.pressure_problems(self.before, after, *pending)
        fetched, self.fetched = self.fetched, None
        if fetched is not None and not problems:
            problems = host.prefetch_problems(self.before, after, *fetched,
                                              self.trace.page_size)
        self._count_moves(self.before, after)
        self.before = after
        return problems

    def _count_moves(self, before, after):
        old = {(n["path"][0], tuple(n["path"][1])): n for n in before["nodes"]}
        for node in after["nodes"]:
            was = old.get((node["path"][0], tuple(node["path"][1])))
            if was is None:
                continue
            if was["device"] is not None and node["device"] is None:
                self.count(DEMOTED)
            if was["device"] is not None and was["host"] is not None and node["host"] is None:
                self.count(RECLAIMED)
        paths = {(n["path"][0], tuple(n["path"][1])) for n in after["nodes"]}
        if any(n["device"] is None and n["host"] is not None and path not in paths
               for path, n in old.items()):
            self.count(DROPPED)

    def context_lines(self):
        core = getattr(self, "core", None)
        return [("tree core", describe_core(core))] if core else []
