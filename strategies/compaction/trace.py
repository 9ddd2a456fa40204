"""The compaction `Trace`: operations over an up and a down pool sharing one byte buffer, its
version-stable JSON form, and the plain-value `PoolSnapshot` both oracle and implementation report.

Standard library only. Ops name pages by selectors (`Pick`) resolved against the live pages at
run time, so every op stays valid when a trace is shrunk or edited by hand.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field

from kvfuzz.strategies.paged.case import Origin

FORMAT = "kvfuzz-compaction-trace/1"
POOLS = ("up", "down")
WHERE = ("top", "bottom", "middle", "random", "all")  # top = the pages nearest the frontier
WHICH = ("oldest", "newest", "all")                   # which unfired event a Fire completes


class TraceFormatError(ValueError):
    """A trace dict is malformed; the message names the field and the bad value."""


@dataclass(frozen=True)
class Params:
    """Geometry of the shared buffer (spec §8.2). Page size is 1 token: compaction is page-level."""

    total_bytes: int = 256
    epp_up: int = 8
    epp_down: int = 8
    sink_bytes: int = 8
    two_ended: bool = True
    move_cap: int = 2

    def pools(self) -> tuple[str, ...]:
        return POOLS if self.two_ended else POOLS[:1]


@dataclass(frozen=True)
class Pick:
    """`n` live pages of one pool chosen by position in depth order (base first, frontier last)."""

    where: str = "top"
    n: int = 1
    salt: int = 0

    def resolve(self, by_depth: list[int]) -> list[int]:
        """The chosen vids, from the pool's live vids ordered base first; never a duplicate."""
        n = len(by_depth) if self.where == "all" else min(self.n, len(by_depth))
        if self.where in ("top", "all"):
            return by_depth[len(by_depth) - n:]
        if self.where == "bottom":
            return by_depth[:n]
        if self.where == "middle":
            start = (len(by_depth) - n) // 2
            return by_depth[start:start + n]
        return random.Random(f"pick:{self.salt}").sample(by_depth, n)


@dataclass(frozen=True)
class Alloc:
    """Allocate `n` pages; if `relative`, `n` is added to the pool's `avail()` (n=+1 overshoots)."""

    pool: str
    n: int
    relative: bool = False


@dataclass(frozen=True)
class Free:
    pool: str
    pick: Pick


@dataclass(frozen=True)
class Flush:
    pool: str
    urgent: bool


@dataclass(frozen=True)
class Drain:
    pool: str
    urgent: bool


@dataclass(frozen=True)
class Forward:
    """Launch a forward: a new unfired event, writing the picked pages of each pool (None: none)."""

    up: Pick | None = None
    down: Pick | None = None


@dataclass(frozen=True)
class Fire:
    which: str = "oldest"


Op = Alloc | Free | Flush | Drain | Forward | Fire
_KINDS = {"alloc": Alloc, "free": Free, "flush": Flush, "drain": Drain, "forward": Forward,
          "fire": Fire}
_NAMES = {cls: name for name, cls in _KINDS.items()}


@dataclass(frozen=True)
class Trace:
    params: Params
    ops: tuple[Op, ...]
    origin: Origin | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)  # provenance, e.g. "shrunk from 300 ops"

    def trace_id(self) -> str:
        """A short hash of params and ops: names corpus files, independent of provenance."""
        content = to_json(self)
        content.pop("origin", None)
        content.pop("note", None)
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        return to_json(self)

    @staticmethod
    def from_json(data: object) -> Trace:
        return from_json(data)


@dataclass(frozen=True)
class PoolSnapshot:
    """Everything observable about one pool, as plain values, compared field by field."""

    wm: int
    live: int
    avail: int
    num_moves: int
    holes: tuple[int, ...]                             # sorted
    pending: tuple[tuple[int, tuple[int, ...]], ...]   # (event id, sorted pages), by event id
    pending_set: tuple[int, ...]                       # the host mirror, sorted
    inflight: tuple[int, ...]                          # write-set vids of an unfired forward
    free_vids: tuple[int, ...]                         # FIFO order
    v2p: tuple[int, ...]
    p2v: tuple[int, ...]


def generate_trace(seed: int, index: int, num_ops: int = 300) -> Trace:
    """Trace `index` of `seed` from the plain-random generator (`strategies.compaction_random`)."""
    from kvfuzz.strategies.compaction.generator import generate_trace as generate
    return generate(seed, index, num_ops)


def describe_op(op: Op) -> str:
    """One line, e.g. `free up top 3` or `forward up=random 2 (salt 7), down=-`."""
    if isinstance(op, Alloc):
        return f"alloc {op.pool} {'avail' + format(op.n, '+d') if op.relative else op.n}"
    if isinstance(op, Free):
        return f"free {op.pool} {_describe_pick(op.pick)}"
    if isinstance(op, (Flush, Drain)):
        return f"{_NAMES[type(op)]} {op.pool} {'urgent' if op.urgent else 'non-urgent'}"
    if isinstance(op, Forward):
        return f"forward up={_describe_pick(op.up)}, down={_describe_pick(op.down)}"
    return f"fire {op.which}"


def _describe_pick(pick: Pick | None) -> str:
    if pick is None:
        return "-"
    if pick.where == "all":
        return "all"
    return f"{pick.where} {pick.n}" + (f" (salt {pick.salt})" if pick.where == "random" else "")


# --- JSON -----------------------------------------------------------------------------------

def to_json(trace: Trace) -> dict:
    data = {"format": FORMAT, "params": dict(vars(trace.params)),
            "ops": [_op_to_json(op) for op in trace.ops]}
    if trace.origin is not None:
        data["origin"] = dict(vars(trace.origin))
    if trace.note:
        data["note"] = trace.note
    return data


def _op_to_json(op: Op) -> dict:
    data = {"op": _NAMES[type(op)]}
    for name, value in vars(op).items():
        data[name] = dict(vars(value)) if isinstance(value, Pick) else value
    return data


def dumps(trace: Trace) -> str:
    return json.dumps(to_json(trace), indent=1) + "\n"


def from_json(data: object) -> Trace:
    """Decode and validate; every problem raises `TraceFormatError` naming the field and value."""
    _expect(isinstance(data, dict), "(top level)", "expected a JSON object", type(data).__name__)
    _expect(data.get("format") == FORMAT, "format", f"expected {FORMAT!r}", data.get("format"))
    unknown = set(data) - {"format", "params", "ops", "origin", "note"}
    _expect(not unknown, "(top level)", "unknown field", sorted(unknown))
    params = _params(data.get("params"))
    ops = data.get("ops")
    _expect(isinstance(ops, list), "ops", "expected a list", ops)
    decoded = tuple(_op(raw, f"ops[{i}]", params) for i, raw in enumerate(ops))
    origin = data.get("origin")
    if origin is not None:
        _expect(isinstance(origin, dict) and set(origin) == {"generator", "seed", "index"},
                "origin", "expected {generator, seed, index}", origin)
        _int(origin, "seed", "origin.seed")
        _int(origin, "index", "origin.index")
        origin = Origin(str(origin["generator"]), origin["seed"], origin["index"])
    return Trace(params, decoded, origin, str(data.get("note", "")))


def loads(text: str) -> Trace:
    try:
        return from_json(json.loads(text))
    except json.JSONDecodeError as error:
        raise TraceFormatError(f"not valid JSON: {error}") from None


def _params(raw: object) -> Params:
    _expect(isinstance(raw, dict), "params", "expected an object", raw)
    unknown = set(raw) - set(vars(Params()))
    _expect(not unknown, "params", "unknown field", sorted(unknown))
    values = {name: raw.get(name, default) for name, default in vars(Params()).items()}
    for name in ("total_bytes", "epp_up", "epp_down", "sink_bytes", "move_cap"):
        _int(values, name, f"params.{name}", low=1)
    _expect(type(values["two_ended"]) is bool, "params.two_ended", "expected true or false",
            values["two_ended"])
    params = Params(**values)
    for pool, epp in (("up", params.epp_up), ("down", params.epp_down)):
        pages = params.total_bytes // epp
        reserved = -(-params.sink_bytes // epp)
        _expect(params.sink_bytes >= max(params.epp_up, params.epp_down), "params.sink_bytes",
                "must be at least max(epp_up, epp_down)", params.sink_bytes)
        _expect(pages > reserved, f"params.epp_{pool}", "leaves no page above the sink", epp)
    return params


def _op(raw: object, where: str, params: Params) -> Op:
    _expect(isinstance(raw, dict), where, "expected an object", raw)
    kind = _KINDS.get(raw.get("op"))
    _expect(kind is not None, f"{where}.op", f"expected one of {', '.join(_KINDS)}", raw.get("op"))
    fields = {name: raw[name] for name in raw if name != "op"}
    names = set(kind.__dataclass_fields__)
    _expect(set(fields) <= names, where, f"unexpected fields for {raw['op']}",
            sorted(set(fields) - names))
    if "pool" in names:
        _expect(fields.get("pool") in params.pools(), f"{where}.pool",
                f"expected one of {', '.join(params.pools())}", fields.get("pool"))
    for name in ("urgent", "relative"):
        if name in names:
            fields.setdefault(name, False)
            _expect(type(fields[name]) is bool, f"{where}.{name}", "expected true or false",
                    fields[name])
    if kind is Alloc:
        _int(fields, "n", f"{where}.n", low=-(2**31) if fields.get("relative") else 1)
    if kind is Fire:
        _expect(fields.get("which", "oldest") in WHICH, f"{where}.which",
                f"expected one of {', '.join(WHICH)}", fields.get("which"))
    for name in ("pick", "up", "down"):
        if name in fields and (name == "pick" or fields[name] is not None):
            fields[name] = _pick(fields[name], f"{where}.{name}")
    if kind is Forward and not params.two_ended:
        _expect(fields.get("down") is None, f"{where}.down", "single-ended trace", fields["down"])
    try:
        return kind(**fields)
    except TypeError as error:
        raise TraceFormatError(f"field '{where}': {error}") from None


def _pick(raw: object, where: str) -> Pick:
    _expect(isinstance(raw, dict) and set(raw) <= {"where", "n", "salt"}, where,
            "expected {where, n, salt}", raw)
    _expect(raw.get("where", "top") in WHERE, f"{where}.where",
            f"expected one of {', '.join(WHERE)}", raw.get("where"))
    _int(raw, "n", f"{where}.n", low=1, default=1)
    _int(raw, "salt", f"{where}.salt", default=0)
    return Pick(**raw)


def _int(data: dict, name: str, label: str, low: int = -(2**63), default: int | None = None):
    value = data.get(name, default)
    _expect(type(value) is int and low <= value < 2**63, label,
            f"expected an integer >= {low}", value)


def _expect(ok: bool, name: str, problem: str, value: object) -> None:
    if not ok:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise TraceFormatError(f"field '{name}': {problem}, got {shown}")
