"""Decoding and validation of "kvfuzz-unified-trace/1" JSON: the radix format's fields and ops
(`strategies.radix.codec`, with its limits), `components`, the SWA component's `window` and the
Mamba component's `mamba_slots`; every problem raises `FormatError` naming the source, the field
and the value."""

from __future__ import annotations

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.radix import codec as radix
from kvfuzz.strategies.radix.trace import NAMES
from kvfuzz.strategies.unified.trace import (COMPONENTS, FORMAT, MAX_MAMBA_SLOTS, MAX_WINDOW,
                                             TREE_OPS, Trace)

MAX_OPS = radix.MAX_OPS


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, radix.BASE_FIELDS | {"components", "window", "mamba_slots"})
    components = reader.choice(data.get("components"), "components", COMPONENTS)
    own = {"full+swa": "window", "full+mamba": "mamba_slots"}.get(components)
    for name in ("window", "mamba_slots"):  # each component's own field, and nobody else's
        if name != own:
            reader.expect(name not in data, name, f"only {_owner(name)!r} components have "
                          f"{name}, these are {components!r}", data.get(name))
    window = mamba_slots = 0
    if own == "window":
        window = reader.integer(data.get("window"), "window", low=1, high=MAX_WINDOW)
    elif own == "mamba_slots":
        mamba_slots = reader.integer(data.get("mamba_slots"), "mamba_slots", low=1,
                                     high=MAX_MAMBA_SLOTS)
    trace = Trace(**radix.read_fields(reader, data), components=components, window=window,
                  mamba_slots=mamba_slots)
    if mamba_slots:  # no request of its own holds a Mamba state here: tree ops only
        for i, op in enumerate(trace.ops):
            reader.expect(isinstance(op, TREE_OPS), f"ops[{i}].op", "a \"full+mamba\" trace "
                          f"has tree ops only ({', '.join(NAMES[k] for k in TREE_OPS)})",
                          NAMES[type(op)])
    return trace


def _owner(name: str) -> str:
    return "full+swa" if name == "window" else "full+mamba"


def worst_input() -> dict:
    """The radix format's worst input (the pool filled by the longest requests, then every op
    left a probe that reads the whole tree) for a unified cache."""
    return {**radix.worst_input(), "format": FORMAT, "components": "full"}
