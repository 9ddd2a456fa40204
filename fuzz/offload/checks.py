"""The offload judge's properties, as plain functions over what the implementation answered and
what the caller knows (the transfers it has in flight, the chunks it was told to write, the keys
it completed or failed, what the events announced): none of them asks the oracle. Each returns
(label, text) problems with the keys and numbers in the text."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import list_diff, short
from kvfuzz.oracle.offload.model import FAILED, HIT, MISS, REMOVED, STORED
from kvfuzz.strategies.inputs import few


def keys_of(flat) -> list[tuple[int, int]]:
    """Keys from the driver's flat [hash, group, ...] (`impl/offload/driver.py`)."""
    return list(zip(flat[::2], flat[1::2]))


def entries_of(flat) -> list[tuple[tuple[int, int], int, int]]:
    """(key, reference count, chunk) from the driver's flat contents."""
    return [((h, g), ref, chunk) for h, g, ref, chunk in zip(*[iter(flat)] * 4)]


def state_of(answer) -> dict:
    """The driver's `state()` answer as named parts: contents, policy (its lists, and ARC's
    target), sizes, stats (as the model's `stats()` names them), records (the keys the policy
    keeps a record for, ghosts aside)."""
    contents, names, lists, target, sizes, stats, allocations, records = answer
    policy = dict(zip(names.split(), map(keys_of, lists)))
    if target is not None:
        policy["target"] = target
    pinned, writing, used, skipped = stats
    if pinned == -1 and allocations is None:  # a release with the usage gauge alone (vLLM
        found = {"used": used}                 # 0.25): what the model counts as pinned and
    else:                                     # being stored is read as their sum
        found = {"pinned": pinned, "writing": writing, "allocations": allocations}
        if used != -1:
            found["used"] = used
    if skipped != -1:
        found["skipped"] = skipped
    return {"contents": entries_of(contents), "policy": policy,
            "sizes": dict(zip(("free", "evictable", "writing"), sizes)), "stats": found,
            "records": keys_of(records)}


def event_kind(removed: bool, metadata_only: bool, medium: str) -> str:
    """An implementation's event as the model names it."""
    kind = STORED if not removed else FAILED if metadata_only else REMOVED
    return kind if medium == "CPU" else f"{kind} on {medium}"


def evictions(evicted, offered, loading: set, storing: set,
              present: set) -> list[tuple[str, str]]:
    """A store may evict only stored chunks with no transfer in flight, none of those it was
    offered (an offered chunk that is stored must stay), and only chunks in the cache."""
    problems = []
    for key in evicted:
        why = ("a load of it is in flight" if key in loading else
               "its store is in flight" if key in storing else
               "it was offered in this call" if key in offered else
               "it was not in the cache" if key not in present else None)
        if why:
            problems.append(("evicted in use", f"prepare_store evicted {key} while {why}"))
    return problems


def new_chunks(to_store, chunks, held: dict, num_chunks: int) -> list[tuple[str, str]]:
    """The chunks a store writes to: one per key, inside the pool, none holding another key."""
    if len(chunks) != len(to_store):
        return [("chunk", f"prepare_store gave {len(chunks)} chunks for {len(to_store)} keys")]
    owner = {chunk: key for key, chunk in held.items()}
    problems = []
    for key, chunk in zip(to_store, chunks):
        if not 0 <= chunk < num_chunks:
            problems.append(("chunk", f"{key} is written to chunk {chunk}, outside "
                                      f"0..{num_chunks - 1}"))
        elif chunk in owner:
            problems.append(("chunk", f"{key} is written to chunk {chunk}, which holds "
                                      f"{owner[chunk]}"))
        owner[chunk] = key
    return problems


def loaded_chunks(keys, chunks, held: dict) -> list[tuple[str, str]]:
    """A load reads each key from the chunk its store wrote."""
    if len(chunks) != len(keys):
        return [("chunk", f"prepare_load gave {len(chunks)} chunks for {len(keys)} keys")]
    return [("chunk", f"the load of {key} reads chunk {chunk}; its store wrote chunk "
                      f"{held.get(key)}") for key, chunk in zip(keys, chunks)
            if held.get(key) != chunk][:4]


def findable(stored: set, failed: set, answers: dict) -> list[tuple[str, str]]:
    """Every key whose store completed is a HIT (until an eviction or a reset says otherwise);
    every key whose store failed is a MISS (until it is stored again). `answers`: key -> what
    lookup said."""
    problems = []
    for key, answer in answers.items():
        if key in stored and answer != HIT:
            problems.append(("stored not found", f"the store of {key} completed, but lookup "
                                                 f"says {answer}"))
        elif key in failed and answer != MISS:
            problems.append(("failed store found", f"the store of {key} failed, but lookup "
                                                   f"says {answer}"))
    return problems[:4]


def announced(published: set, events, ready: set) -> tuple[set, list[tuple[str, str]]]:
    """The keys a consumer of the events believes stored after `events`, and whether that is
    exactly the stored keys in the cache."""
    view = set(published)
    for kind, keys in events:
        if kind == STORED:
            view.update(keys)
        else:
            view.difference_update(keys)
    if view == ready:
        return view, []
    gone, unannounced = sorted(view - ready), sorted(ready - view)
    parts = [f"{len(gone)} announced stored are not stored: {few(gone, 4)}"] if gone else []
    parts += [f"{len(unannounced)} stored were never announced: {few(unannounced, 4)}"] \
        if unannounced else []
    return view, [("events vs contents", "; ".join(parts))]


def sizes(counts: dict, contents, num_chunks: int) -> list[tuple[str, str]]:
    """The manager's own counts against its own cache: free chunks, evictable (stored, no load
    in flight), being written. A count the manager does not keep (None: vLLM before 0.24 counts
    no evictable chunks) is not compared."""
    expected = {"free": num_chunks - len(contents),
                "evictable": sum(ref == 0 for _, ref, _ in contents),
                "writing": sum(ref < 0 for _, ref, _ in contents)}
    return [("sizes", f"{name} count {counts.get(name)}, but the cache holds {value} "
                      f"({len(contents)} keys of {num_chunks} chunks)")
            for name, value in expected.items()
            if counts.get(name) is not None and counts.get(name) != value]


def policy_memory(records, contents, ghosts: dict, capacity: int) -> list[tuple[str, str]]:
    """The policy's memory is bounded by the pool, as a server running for months needs: a
    record only for a key in the cache (nothing kept for a key evicted, failed or reset), and
    each ghost list (ARC's B1, B2) at most the capacity."""
    cached = {key for key, _, _ in contents}
    stale = [key for key in records if key not in cached]
    problems = [("policy memory", f"the policy keeps a record of {len(stale)} key(s) not in "
                                  f"the cache: {few(stale, 4)}")] if stale else []
    return problems + [("policy memory", f"ghost list {name} holds {len(keys)} keys, over the "
                                         f"capacity {capacity}")
                       for name, keys in sorted(ghosts.items()) if len(keys) > capacity]


def contents(expected: dict, actual: dict) -> list[tuple[str, str]]:
    """Every key in the cache with its reference count (-1: being stored, n: loads in flight)."""
    wrong = sorted(k for k in set(expected) | set(actual) if expected.get(k) != actual.get(k))
    if not wrong:
        return []
    shown = "; ".join(f"{k}: expected {_ref(expected.get(k))}, actual {_ref(actual.get(k))}"
                      for k in wrong[:3])
    return [("contents", f"{len(wrong)} keys differ: {shown}"
                         f"{'...' if len(wrong) > 3 else ''}")]


def _ref(count) -> str:
    return "not in the cache" if count is None else "being stored" if count < 0 else \
        "stored" if count == 0 else f"stored, {count} load(s) in flight"


def chunk_map(contents, held: dict) -> list[tuple[str, str]]:
    """Every key in the cache sits on the chunk its store was given, each chunk under one key."""
    problems, owner = [], {}
    for key, _, chunk in contents:
        if key in held and held[key] != chunk:
            problems.append(("chunk", f"{key} sits on chunk {chunk}; its store wrote chunk "
                                      f"{held[key]}"))
        if chunk in owner:
            problems.append(("chunk", f"chunk {chunk} holds {owner[chunk]} and {key}"))
        owner[chunk] = key
    return problems[:4]


def as_read(expected: dict, actual: dict) -> dict:
    """The model's stats as a release that reports the usage gauge alone (vLLM 0.25) reads:
    the chunks pinned or being stored, as one count; else as they are."""
    if "pinned" in actual or "used" not in actual:
        return expected
    found = {"used": expected["pinned"] + expected["writing"]}
    if "skipped" in expected:  # (a skipped count it does not report shows as a difference)
        found["skipped"] = expected["skipped"]
    return found


def views(expected: dict, actual: dict, label: str) -> list[tuple[str, str]]:
    """Each part of a state view that differs (lists as their first difference)."""
    problems = []
    for name in sorted(set(expected) | set(actual)):
        want, got = expected.get(name), actual.get(name)
        if want == got:
            continue
        text = list_diff(want, got) if isinstance(want, list) and isinstance(got, list) \
            else f"expected {short(want)}, actual {short(got)}"
        problems.append((label, f"{name}: {text}"))
    return problems
