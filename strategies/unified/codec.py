"""Decoding and validation of "kvfuzz-unified-trace/1" JSON: the radix format's fields and ops
(`strategies.radix.codec`, with its limits) and `components`; every problem raises `FormatError`
naming the source, the field and the value."""

from __future__ import annotations

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.radix import codec as radix
from kvfuzz.strategies.unified.trace import COMPONENTS, FORMAT, MAX_WINDOW, Trace

MAX_OPS = radix.MAX_OPS


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, radix.FIELDS | {"components", "window"})
    components = reader.choice(data.get("components"), "components", COMPONENTS)
    window = 0
    if components == "full+swa":  # the SWA component needs its window; nothing else has one
        window = reader.integer(data.get("window"), "window", low=1, high=MAX_WINDOW)
    else:
        reader.expect("window" not in data, "window", f"only \"full+swa\" components have a "
                      f"window, these are {components!r}", data.get("window"))
    return Trace(**radix.read_fields(reader, data), components=components, window=window)


def worst_input() -> dict:
    """The radix format's worst input (the pool filled by the longest requests, then every op
    left a probe that reads the whole tree) for a unified cache."""
    return {**radix.worst_input(), "format": FORMAT, "components": "full"}
