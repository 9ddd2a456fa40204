"""What the Mamba judge (`mamba_lockstep.py`) checks of a unified cache with the Mamba component,
from one snapshot (`impl/unified/reader.py`, its "mamba" part: each node's state slot, the state
pool's free slots, the Mamba sizes) and the oracle's facts (`oracle.unified.mamba`): the state pool
conserved, the sizes with their sign, `total_size()`, a state only where an insert ended, what an
insert leaves and answers, and where a match ends and says its branch starts."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import short
from kvfuzz.fuzz.unified.swa_state import namespace_of
from kvfuzz.oracle.radix.invariants import node_name
from kvfuzz.oracle.unified.mamba import accepted_length, branching_seqlen, pool_problems


def mamba_problems(snap: dict, nodes, ends: set) -> list[tuple[str, str]]:
    """The state pool and the Mamba sizes against the tree's states; a state only where an insert
    ended (`ends`: (namespace, key) of each insert since the last reset)."""
    mamba = snap["mamba"]
    states = [None if s is None else (s[0] if len(s) == 1 else tuple(s)) for s in
              mamba["states"]]
    problems = [("mamba pool", text) for text in pool_problems(
        states, mamba["free"], mamba["capacity"], mamba["available"])]
    held = sum(s is not None for s in states)
    off = mamba["evictable"] + mamba["protected"] - held
    if off:
        problems.append(("mamba sizes", f"mamba_evictable_size() {mamba['evictable']} + "
                                        f"mamba_protected_size() {mamba['protected']} vs {held} "
                                        f"states in the tree: {abs(off)} "
                                        f"{'counted twice' if off > 0 else 'missing'}"))
    elif mamba["protected"]:
        problems.append(("mamba sizes", f"mamba_protected_size() {mamba['protected']} with no "
                                        f"lock held"))
    full = sum(len(n.value) for n in nodes)
    if list(snap["total"][:2]) != [full, held]:
        problems.append(("total_size", f"total_size() says {tuple(snap['total'])}, the nodes "
                                       f"hold {full} full slots and {held} Mamba states"))
    stray = next((n for n, s in zip(nodes, states) if s is not None and n.path not in ends),
                 None)
    if stray is not None:
        problems.append(("mamba state", f"node {node_name(stray.path)} holds a Mamba state, "
                                        f"and no insert ended there"))
    return problems


def segments(nodes, states: list, ns, key) -> list[tuple[int, bool]]:
    """(tokens, holds a state) of each node `key` reaches in full, root first."""
    on_path = sorted((len(n.path[1]), len(n.key), s is not None) for n, s in zip(nodes, states)
                     if namespace_of(n) == ns and tuple(key[:len(n.path[1])]) == n.path[1])
    return [(tokens, held) for _, tokens, held in on_path]


def insert_problems(nodes, states: list, ns, key, exist: bool,
                    had: bool | None) -> list[tuple[str, str]]:
    """An insert of `key` answered `mamba_exist=exist`; `had`: whether the tree held a state at
    the key's end before it (None: unknown, something was evicted in between)."""
    at = [s for n, s in zip(nodes, states) if n.path == (ns, tuple(key))]
    if not at or at[0] is None:
        return [("mamba insert", f"insert({short(key, 30)}) left no Mamba state at its key's "
                                 f"end")]
    if had is not None and exist != had:
        return [("mamba insert", f"insert({short(key, 30)}) answered mamba_exist={exist}, the "
                                 f"tree {'had a' if had else 'had no'} state at its key's end")]
    return []


def match_problems(nodes, states: list, ns, key, matched: int, branch: int | None,
                   grid: int, before_match: bool = False) -> list[tuple[str, str]]:
    """A match of `key` (page-aligned, no limit) said `matched` tokens and `branch`."""
    found = segments(nodes, states, ns, key)
    expected, full = accepted_length(found), sum(tokens for tokens, _ in found)
    if matched != expected:
        return [("mamba match", f"match({short(key, 30)}) matched {matched} tokens; the deepest "
                                f"node with a Mamba state on its {full}-token full hit ends at "
                                f"{expected}")]
    wanted = branching_seqlen(full, matched, grid, before_match)
    if branch != wanted:
        return [("mamba branching", f"match({short(key, 30)}): mamba_branching_seqlen {branch}, "
                                    f"expected {wanted} (full hit {full}, matched {matched}, "
                                    f"grid {grid})")]
    return []
