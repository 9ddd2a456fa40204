"""What the Mamba judge (`mamba_lockstep.py`) checks of a unified cache whose Mamba component lives
on SGLang's unified memory pool (the Full donor, `impl/unified/mamba.py`), from the snapshots
before and after an op and the oracle's facts (`oracle.unified.donor`): the shared full side
conserved, and of a Mamba allocation's eviction: a state obtained unless nothing evictable was
left, what it answers against what left the tree, no state taken for bytes Full could give, and
the donor walk stopped at the first sufficient victim."""

from __future__ import annotations

from typing import NamedTuple

from kvfuzz.fuzz.radix.state import namespace
from kvfuzz.oracle.unified.donor import overshoot, shared_full_problems, victim_bytes


def full_side_problems(snap: dict, nodes, page_size: int) -> list[tuple[str, str]]:
    """The shared buffer's full side against the tree (no request holds pages: tree ops)."""
    cached = {slot // page_size for node in nodes for slot in node.value}
    tokens = sum(len(node.value) for node in nodes)
    return [("allocator", text) for text in shared_full_problems(
        cached, snap["free"], snap["full_allocated"], tokens)]


class Brief(NamedTuple):
    path: tuple
    value: list


def refusal_problems(refused: int | None, snap: dict) -> list[tuple[str, str]]:
    """An insert's `alloc(refused)` refused after its `evict_for_alloc`: on the shared buffer the
    eviction runs to an availability target, so only with nothing evictable left."""
    if not refused or not snap["full_evictable"]:
        return []
    return [("eviction", f"alloc({refused}) refused after evict_for_alloc, with "
                         f"{snap['full_evictable']} full tokens still evictable")]


def eviction_problems(nodes, after: dict, answer: list, inserted: tuple | None,
                      page_size: int, full_donor: bool = True) -> list[tuple[str, str]]:
    """`answer`: `mamba_slot`'s [slot, states evicted, tokens evicted, the buffer and the tree
    just before the eviction]; `nodes`, `after`: the tree after the op; `inserted`: (path,
    mamba_exist) of the insert that followed (None: none): a state it put where the eviction
    took one is the insert's, so that node kept its state only if the insert found one.
    Without a Full donor (`full_donor` False: before 0.5.20) a state's eviction is the only
    way to its bytes: the donor's order and its walk are not judged; the answer against what
    left the tree, and a state obtained while something is evictable, are."""
    slot, states, tokens, buffer = answer
    if buffer is None:  # no eviction
        return []
    mamba = after["mamba"]
    if slot is None and (after["full_evictable"] or mamba["evictable"]):
        return [("mamba donor", f"no Mamba state after evict_for_alloc(mamba_num=1), with "
                                f"{after['full_evictable']} full tokens and "
                                f"{mamba['evictable']} states still evictable")]
    now = {node.path: (node, state) for node, state in zip(nodes, mamba["states"])}
    was = [(Brief((namespace(extra), tuple(path)), slots), state)
           for extra, path, slots, state in buffer["nodes"]]
    kept = {node.path: now[node.path][1] for node, _ in was if _same(node, now.get(node.path))}
    if inserted is not None and inserted[0] in kept:
        kept[inserted[0]] = kept[inserted[0]] if inserted[1] else None
    gone = [(node, state) for node, state in was if node.path not in kept]
    stripped = [node for node, state in was
                if state is not None and node.path in kept and kept[node.path] is None]
    gone_tokens = sum(len(node.value) for node, _ in gone)
    gone_states = sum(state is not None for _, state in gone) + len(stripped)
    if (tokens, states) != (gone_tokens, gone_states):
        return [("mamba donor", f"evict_for_alloc(mamba_num=1) answered {tokens} tokens and "
                                f"{states} states evicted; {gone_tokens} tokens and "
                                f"{gone_states} states left the tree")]
    if not full_donor:
        return []
    need = max(0, buffer["state"] - buffer["gap"])
    fundable = buffer["full_evictable"] // page_size * buffer["page"] >= need
    if buffer["ids"] and fundable and stripped:
        return [("mamba donor", f"evict_for_alloc(mamba_num=1) took the state of "
                                f"{len(stripped)} node(s) that stay, with {buffer['ids']} Mamba "
                                f"ids free and {buffer['full_evictable']} full tokens evictable "
                                f"to fund its {need} missing bytes: Full is the donor")]
    victims = [victim_bytes(len(node.value), state is not None, page_size, buffer["page"],
                            buffer["state"]) for node, state in gone]
    past = overshoot(victims, need) if buffer["ids"] and slot is not None else None
    if past is not None:
        return [("mamba donor", f"evict_for_alloc(mamba_num=1) evicted {len(victims)} nodes, "
                                f"{sum(victims)} bytes, for a state missing {need} bytes: at "
                                f"least {past} bytes past the first sufficient victim")]
    return []


def _same(node, found) -> bool:
    """Whether `found` (after the op: (node, state), or None) is `node` still: its path, and
    its slots or, after a split above it, their tail (an insert that brings a path back after
    an eviction brings fresh slots)."""
    if found is None or not found[0].value:
        return False
    value = list(found[0].value)
    return list(node.value[len(node.value) - len(value):]) == value
