"""The Rust core against the Python core through the public API, from what the twin driver kept
(`impl/unified/twin.py`): every call's answer (or exception) on both, then the whole public state
(nodes by path with their slots and children and whether they are locked, the sizes, the
allocator's free pages in order, the rows, the walk, and the KV events page by page with their
hashes, which no oracle models). Node handles are the cores' own, so nothing here compares them."""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.engine.lockstep import short
from kvfuzz.impl.unified.twin_parts import PAIRS, PREFIX, SIZES, STATE

LABEL = "cores differ"
SAME = ("evictable", "protected", "total", "available", "free", "rows", "swa", "mamba")


def twin_of(snap: dict) -> dict | None:
    """{"pairs": ..., "sizes": the twin's sizes or None, "state": None, ("answered", the twin's
    state), ("sizes",) (a read without the twin's whole state) or the raise} from a snapshot,
    where the twin driver sends its parts flat (`impl/unified/twin_parts.py`), or as one
    "twin" part."""
    if "twin" in snap:
        return {"sizes": None, **snap["twin"]}
    if PAIRS not in snap:
        return None
    state = snap[STATE]
    if state is not None and state[0] == "answered":
        state = ("answered", {key[len(PREFIX):]: value for key, value in snap.items()
                              if key.startswith(PREFIX) and key not in (PAIRS, STATE, SIZES)})
    elif state is not None and state[0] == "sizes":
        state = ("sizes",)
    return {"pairs": snap[PAIRS], "sizes": snap[SIZES], "state": state}


def twin_problems(snap: dict, held: list | None = None) -> list[tuple[str, str]]:
    """The cores' answers since the last read, their sizes, and where the read has the twin's
    whole state, that state. `held`: the Rust core's KV events of the reads since the twin's
    last whole state (the lock step's list, kept here), compared page by page with the twin's,
    which it publishes once a whole read; None: `snap`'s events are the ones to compare."""
    twin = twin_of(snap)
    if twin is None:
        return []
    for method, rust, python in twin["pairs"]:
        if rust[:2] != python[:2]:  # a raise: its type (its message may name a handle)
            return [(LABEL, f"{method}: the Rust core {_said(rust)}, the Python core "
                            f"{_said(python)}")]
    state = twin["state"]
    if state is None:
        return []
    if state[0] == "raised":
        return [(LABEL, f"the Python core's state could not be read: {state[2]}")]
    if held is not None:
        held += snap["events"]
    ours = [snap.get(name) for name in ("evictable", "protected", "total", "available")]
    if twin["sizes"] is not None and twin["sizes"] != ours:
        return [(LABEL, f"(evictable, protected, total, available) sizes: the Rust core "
                        f"{short(ours, 70)}, the Python core {short(twin['sizes'], 70)}")]
    if state[0] != "answered":
        return []
    if held is None:
        return state_problems(snap, state[1])
    events, held[:] = list(held), []
    return state_problems({**snap, "events": events}, state[1])


def _comparable(part):
    """A part of the state as both cores show it: the SWA lock counts are read only where the
    core exposes its nodes (the Python core), so they are left out."""
    if isinstance(part, dict) and "locks" in part:
        return {key: value for key, value in part.items() if key != "locks"}
    return part


def _said(outcome) -> str:
    return f"raised {outcome[2]}" if outcome[0] == "raised" else \
        f"answered {short(outcome[1], 80)}"


def public(snap: dict) -> dict:
    """A core's state without its handles: nodes by path."""
    unlocked = set(snap["unlocked"])
    nodes = {}
    for parent, extra, tokens, start, value, children in snap["nodes"]:
        locked = bool(value) and not set(value or ()) <= unlocked
        nodes[(extra, tuple(tokens))] = (start, value, children, locked)
    return nodes


def state_problems(rust: dict, python: dict) -> list[tuple[str, str]]:
    problems = []
    ours, theirs = public(rust), public(python)
    if ours != theirs:
        path = next(p for p in sorted(set(ours) | set(theirs), key=repr)
                    if ours.get(p) != theirs.get(p))
        problems.append((LABEL, f"node {short(path, 60)}: the Rust core has "
                                f"{short(ours.get(path), 60)}, the Python core "
                                f"{short(theirs.get(path), 60)} ((start, slots, children, "
                                f"locked))"))
    for name in SAME:
        if _comparable(rust.get(name)) != _comparable(python.get(name)):  # None: no component
            problems.append((LABEL, f"{name}: the Rust core {short(rust[name], 70)}, the Python "
                                    f"core {short(python[name], 70)}"))
    ours, theirs = per_page(rust["events"]), per_page(python["events"])
    if ours != theirs:
        at = next(i for i, (a, b) in enumerate(zip(ours + [None], theirs + [None])) if a != b)
        problems.append((LABEL, f"KV events, page by page: the Rust core's #{at} is "
                                f"{short(ours[at:at + 1], 70)}, the Python core's "
                                f"{short(theirs[at:at + 1], 70)} ({len(ours)} vs {len(theirs)} "
                                f"pages announced)"))
    if Counter(map(tuple, rust["walk"])) != Counter(map(tuple, python["walk"])):
        problems.append((LABEL, "walk_for_kv_canary rows differ"))
    return problems[:3]


def per_page(events) -> list[tuple]:
    """The events one page at a time, in order: how many pages one event carries is a core's own
    batching, which a router applying them in order cannot tell apart; the hashes, their
    chaining and order are compared."""
    found = []
    for event in events:
        if event[0] == "stored":
            _, hashes, parent, tokens, size = event
            for i, h in enumerate(hashes):
                found.append(("stored", h, parent if i == 0 else hashes[i - 1],
                              tuple(tokens[i * size:(i + 1) * size])))
        elif event[0] == "removed":
            found += [("removed", h) for h in event[1]]
        else:
            found.append(tuple(event))
    return found
