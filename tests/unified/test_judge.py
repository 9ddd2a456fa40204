"""The unified judge's own parts on hand-made snapshots (no SGLang needed): a core's nodes read at
the resolution it exposes, the KV-canary walk and the tree's own counts against the tree, the Rust
core against the Python core (answers, raises by type, free pages in order, events page by page,
whatever each core batches), and which core ran, in a report and under a summary row."""

from collections import Counter
from copy import deepcopy

from kvfuzz.fuzz.engine.tally import Tally
from kvfuzz.fuzz.unified import state
from kvfuzz.fuzz.unified.lockstep import PYTHON, RUST, core_problems, describe_core
from kvfuzz.fuzz.unified.target import UNIFIED
from kvfuzz.fuzz.unified.twin import twin_problems
from kvfuzz.impl.unified.twin_parts import PAIRS, PREFIX, SIZES, STATE
from kvfuzz.oracle.unified.model import UnifiedModel


def model_snapshot(model: UnifiedModel, inner: bool = False) -> dict:
    """What the reader would give for the model's own tree (Rust-like without `inner`)."""
    views = model.views()
    index = {view.path: i for i, view in enumerate(views)}
    nodes = [(index.get(v.parent, -1), None, list(v.path[1]), len(v.path[1]) - len(v.key),
              list(v.value), sum(1 for w in views if w.parent == v.path)) for v in views]
    walk = []
    for v, row in zip(views, nodes):
        parent = views[row[0]].value[-1] if row[0] >= 0 else -1
        walk += [(s, row[3] + j, parent if j == 0 else v.value[j - 1])
                 for j, s in enumerate(v.value)]
    slots = [s for v in views for s in v.value]
    return {"nodes": nodes, "walk": walk, "total": [len(slots), 0],
            "unlocked": sorted(s for v in views if v.lock == 0 for s in v.value),
            "inner": [((0, tuple(v.key[:1])), list(v.key), v.lock, v.hits, v.priority,
                       v.access, v.created) for v in views] if inner else None,
            "evictable": model.tree.evictable_size(), "protected": model.tree.protected_size(),
            "full_evictable": model.tree.evictable_size(),
            "full_protected": model.tree.protected_size(), "available": 0, "free": [7, 8],
            "rows": {}, "events": []}


def tree() -> UnifiedModel:
    model = UnifiedModel(1, 16, "lru")
    model.take([1, 2, 3])
    model.insert([1, 2, 3], 0, 0, [1, 2, 3])
    model.take([4])
    model.insert([1, 2, 9], 0, 0, [1, 2, 4])
    model.tree.lock(model.tree.match(0, [1, 2, 9])[1])
    return model


def test_a_rust_like_snapshot_reads_locks_from_the_walk_and_cuts_the_model_to_match():
    model = tree()
    snap = model_snapshot(model)
    actual, expected = state.views(snap, 1), state.exposed(model.views(), snap)
    assert {v.path[1]: v.lock for v in actual} == {(1, 2): 1, (1, 2, 3): 0, (1, 2, 9): 1}
    assert all(v.edge is None and v.hits == 0 for v in actual)
    assert sorted(map(repr, actual)) == sorted(map(repr, expected))
    assert state.exposed(model.views(), {**snap, "inner": []}) == model.views()


def test_an_empty_tree_is_read_at_its_cores_resolution():
    # issue 21: the read before the first op (no node named) took the Rust core for one that
    # shows its nodes' lock counts; the resolution is asked of the root
    from kvfuzz.impl.unified.reader import _inner

    class Hidden:  # the Rust core: no node objects
        def node_by_id(self, handle):
            raise NotImplementedError

    class Shown:  # the Python core
        def node_by_id(self, handle):
            return object()

    assert _inner(Hidden(), [], 0) is None and _inner(Shown(), [], 0) == []


def test_the_light_reads_node_digest_is_the_models_at_the_cores_resolution():
    from kvfuzz.impl.unified.reader import node_digest

    model = tree()
    for inner in (False, True):
        snap = model_snapshot(model, inner)
        shown = state.exposed(model.views(), snap)
        assert node_digest(snap["nodes"], snap["inner"], set(snap["unlocked"])) == \
            state.node_digest(shown, inner)
    # a second lock on the locked [1 2]: the walk and the unlocked slots stay the same; the
    # Python core shows the count, the Rust core only that the node is locked
    model.tree.lock(model.tree.match(0, [1, 2, 9])[1])
    for inner, differs in ((False, False), (True, True)):
        snap = model_snapshot(tree(), inner)
        shown = state.exposed(model.views(), snap)
        assert (node_digest(snap["nodes"], snap["inner"], set(snap["unlocked"])) !=
                state.node_digest(shown, inner)) is differs


def test_the_walk_and_the_trees_own_counts_are_checked_against_the_tree():
    model = tree()
    snap = model_snapshot(model)
    assert state.walk_problems(snap, model.views()) == []
    shifted = {**snap, "walk": [(s, p + 1, q) for s, p, q in snap["walk"]]}
    assert state.walk_problems(shifted, model.views())[0][0] == "walk"
    unnamed = {**snap, "walk": snap["walk"] + [(9, 0, -1)]}
    assert any("a node no call ever returned" in text
               for _, text in state.walk_problems(unnamed, model.views()))
    wrong = deepcopy(snap)
    wrong["nodes"][0] = wrong["nodes"][0][:5] + (5,)
    assert "children" in state.walk_problems(wrong, model.views())[0][1]
    assert state.walk_problems({**snap, "total": [5, 0]}, model.views())[0][0] == "total_size"
    assert state.walk_problems({**snap, "full_evictable": 0}, model.views())[0][0] == \
        "full_evictable_size"


def test_a_release_without_num_children_is_read_without_that_check():
    # SGLang 0.5.22's TreePathNodeInfo has no num_children: the reader gives None (a 0 there
    # would be a "children" problem on every trace), the count check is left out, and a hidden
    # node holding slots is still seen by the walk's check.
    from types import SimpleNamespace

    from kvfuzz.impl.unified.reader import children_of

    assert children_of(SimpleNamespace(node_id=1)) is None
    assert children_of(SimpleNamespace(num_children=2)) == 2
    model = tree()
    snap = model_snapshot(model)
    old = {**snap, "nodes": [row[:5] + (None,) for row in snap["nodes"]]}
    assert state.walk_problems(old, model.views()) == []
    assert any("a node no call ever returned" in text for _, text in state.walk_problems(
        {**old, "walk": old["walk"] + [(9, 0, -1)]}, model.views()))
    zero = {**snap, "nodes": [row[:5] + (0,) for row in snap["nodes"]]}
    assert "children" in state.walk_problems(zero, model.views())[0][1]


def twin(snap: dict, pairs=(), other=None) -> dict:
    return {**snap, "twin": {"pairs": list(pairs), "state": ("answered", other or snap)}}


def test_the_rust_core_is_set_against_the_python_core_without_their_handles():
    snap = model_snapshot(tree())
    assert twin_problems(twin(snap)) == []
    assert twin_problems(twin(snap, [("evict", ("answered", 3), ("answered", 3))])) == []
    raises = [("release_stale", ("raised", "KeyError", "KeyError: 2"),
               ("raised", "KeyError", "KeyError: 10"))]
    assert twin_problems(twin(snap, raises)) == []  # handles differ between the cores
    differ = [("evict", ("answered", 3), ("raised", "AssertionError", "AssertionError: x"))]
    assert twin_problems(twin(snap, differ)) == [
        ("cores differ", "evict: the Rust core answered 3, the Python core raised "
                         "AssertionError: x")]
    assert "free: the Rust core [7, 8], the Python core [8, 7]" in \
        twin_problems(twin(snap, other={**snap, "free": [8, 7]}))[0][1]
    locked = deepcopy(snap)
    locked["unlocked"] = []
    assert twin_problems(twin(snap, other=locked))[0][1].startswith("node ")


def flat(snap: dict, kind: str, other=None, sizes=None, pairs=()) -> dict:
    """`snap` with the twin driver's flat parts (`impl/unified/twin_parts.py`): a read with its
    whole state ("answered") or only its sizes ("sizes")."""
    ours = [snap.get(name) for name in ("evictable", "protected", "total", "available")]
    found = {**snap, PAIRS: list(pairs), STATE: (kind, 1), SIZES: sizes or ours}
    found.update((PREFIX + key, value) for key, value in (other or {}).items())
    return found


def test_the_twins_sizes_are_judged_every_read_its_state_where_read_whole_with_the_events_between():
    snap = model_snapshot(tree())
    held = []
    first = {**snap, "events": [("stored", [5], None, [1], 1)]}
    assert twin_problems(flat(first, "sizes"), held) == [] and len(held) == 1
    assert "sizes: the Rust core" in twin_problems(flat(snap, "sizes", sizes=[0, 0, 0, 0]),
                                                   [])[0][1]
    # the twin's state, read whole, has its events of both reads: the Rust core's held match
    later = {**snap, "events": [("stored", [6], 5, [2], 1)]}
    both = {**snap, "events": [("stored", [5, 6], None, [1, 2], 1)]}
    assert twin_problems(flat(later, "answered", other=both), held) == [] and held == []
    twin_problems(flat(first, "sizes"), held)
    assert "KV events, page by page" in twin_problems(
        flat(later, "answered", other={**both, "events": []}), held)[0][1]
    assert "free: the Rust core [7, 8]" in twin_problems(
        flat(snap, "answered", other={**snap, "free": [8, 7]}), [])[0][1]


def test_kv_events_are_compared_page_by_page_whatever_each_core_batches():
    snap = model_snapshot(tree())
    one = {**snap, "events": [("stored", [5, 6], None, [1, 2], 1), ("removed", [5, 6])]}
    split = {**snap, "events": [("stored", [5], None, [1], 1), ("stored", [6], 5, [2], 1),
                                ("removed", [5]), ("removed", [6])]}
    assert twin_problems(twin(one, other=split)) == []
    wrong = {**snap, "events": [("stored", [5, 6], None, [1, 2], 1), ("removed", [6, 5])]}
    assert "KV events, page by page" in twin_problems(twin(one, other=wrong))[0][1]


CORE = {"asked": "rust", "backend": "rust", "rust": True, "fallback": None,
        "built": "sglang.srt.mem_cache.rust_tree_core.adapter.RustUnifiedTreeCore",
        "twin": {"asked": "python", "backend": "python", "rust": False, "fallback": None,
                 "built": "sglang.srt.mem_cache.unified_cache.unified_tree_core.UnifiedTreeCore"}}


def test_a_run_that_asked_for_rust_and_got_python_is_refused_and_says_why():
    assert core_problems(CORE) == []
    assert describe_core(CORE) == ("rust (RustUnifiedTreeCore); checked against the python "
                                   "core (UnifiedTreeCore) too")
    fell = {**CORE, "backend": "python", "rust": False, "built": CORE["twin"]["built"],
            "fallback": "PyTorch 2.13.0 is outside the Rust TreeCore support range"}
    [(label, text)] = core_problems(fell)
    assert label == "tree core" and "fallback: PyTorch 2.13.0 is outside" in text
    assert describe_core(fell).startswith("python (UnifiedTreeCore), fell back from Rust: ")
    python = {**CORE["twin"]}
    assert core_problems(python) == [] and describe_core(python) == "python (UnifiedTreeCore)"


def test_the_summary_says_under_each_row_which_core_its_traces_ran_on():
    tally = Tally(cases=3, agree=3, features=Counter({RUST: 3}))
    assert UNIFIED.judge.row_lines(tally)[-1] == "    tree core: rust on 3 of 3 traces"
    mixed = Tally(cases=4, agree=4, features=Counter({RUST: 1, PYTHON: 3}))
    assert UNIFIED.judge.row_lines(mixed)[-1] == \
        "    tree core: rust on 1, python on 3 of 4 traces"
