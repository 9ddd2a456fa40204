"""Decoding and validation of "kvfuzz-unified-trace/1" JSON: the radix format's fields and ops
(`strategies.radix.codec`, with its limits), `components`, the SWA component's `window` and the
Mamba component's `mamba_slots`; every problem raises `FormatError` naming the source, the field
and the value."""

from __future__ import annotations

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.radix import codec as radix
from kvfuzz.strategies.radix.trace import NAMES
from kvfuzz.strategies.unified.trace import (COMPONENTS, FORMAT, HOST_POLICIES, MAX_HOST_SIZE,
                                             MAX_MAMBA_SLOTS, MAX_WINDOW, TREE_OPS, Trace)

# Each component's own field, and its limit.
OWN = {"full+swa": ("window", MAX_WINDOW), "full+mamba": ("mamba_slots", MAX_MAMBA_SLOTS),
       "full+host": ("host_size", MAX_HOST_SIZE)}

MAX_OPS = radix.MAX_OPS


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, radix.BASE_FIELDS | {"components", "window", "mamba_slots",
                                                        "host_size", "host_policy"})
    components = reader.choice(data.get("components"), "components", COMPONENTS)
    own = OWN.get(components, (None, 0))[0]
    values = {}
    for owner, (name, high) in OWN.items():  # each component's own field, and nobody else's
        if name != own:
            reader.expect(name not in data, name, f"only {owner!r} components have "
                          f"{name}, these are {components!r}", data.get(name))
        else:
            values[name] = reader.integer(data.get(name), name, low=1, high=high)
    if "host_policy" in data:  # the host tier's write policy, write_back unless said
        reader.expect(own == "host_size", "host_policy", f"only 'full+host' components have "
                      f"host_policy, these are {components!r}", data.get("host_policy"))
        values["host_policy"] = reader.choice(data.get("host_policy"), "host_policy",
                                              HOST_POLICIES)
    trace = Trace(**radix.read_fields(reader, data), components=components, **values)
    if trace.mamba_slots or trace.host_size:  # no request runs here: tree ops only
        for i, op in enumerate(trace.ops):
            reader.expect(isinstance(op, TREE_OPS), f"ops[{i}].op", f"a {components!r} trace "
                          f"has tree ops only ({', '.join(NAMES[k] for k in TREE_OPS)})",
                          NAMES[type(op)])
    return trace


def worst_input() -> dict:
    """The radix format's worst input (the pool filled by the longest requests, then every op
    left a probe that reads the whole tree) for a unified cache."""
    return {**radix.worst_input(), "format": FORMAT, "components": "full"}
