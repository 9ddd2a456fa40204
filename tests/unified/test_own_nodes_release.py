"""`UnifiedRadixCache` of SGLang 0.5.11 for real (slow): a class whose tree is nodes of its own (no
tree core), its nodes read through a core's read calls (impl/unified/node_tree.py), driven
through the scheduler's calls of its day (impl/radix/legacy.py), the oracle told what the class
promises (read from its sources: one LRU order, no hit counts, no KV events, no lock delta).
The release first on the path of the process running `kvfuzz` (one a run for every file's
commands on it: tests/radix/release_batch.py), installed as
tests/radix/test_legacy_release.py installs it (skipped, and said, only where it cannot be):
the Python entry agrees on seeded traces that reach chunk checkpoints, finishes and evictions,
and a mutant of 0.5.11's own source diverges on the same traces (`own_nodes_mutants.py`); the
Rust entries are one line (no core to ask for); the Mamba entry agrees on seeded traces, its
judge's checkpoint grid read from the cache it built (`MambaCalls.mamba_grid`). Later releases
of such nodes and of the first tree cores: 0.5.12's hits (HiCache's alone), the SWA entry on
0.5.11 and 0.5.14 (its window contract, test_old_windows.py), 0.5.17's Python core. Before the
reader, every unified entry was `not supported: ... has no root_node_handle` there."""

from __future__ import annotations

import re

from tests.helpers import needs_engine
from tests.radix import release_batch
from tests.radix.release_batch import OWN_CORPUS, Trace

pytestmark = needs_engine("sglang")  # slow, and the lock's packages it imports

# A full hit of 96 (pages of 4) past a state at 80: on 0.5.11's 64-token grid the floored hit
# (64) is at or before the match; the seeded keys stay under 64 tokens and never reach it.
_KEY = list(range(1, 101))
BRANCH_BEFORE_MATCH = {
    "format": "kvfuzz-unified-trace/1", "components": "full+mamba", "mamba_slots": 8,
    "page_size": 4, "size": 512, "policy": "lru", "events": False, "ops": [
        {"op": "insert", "tokens": _KEY, "ns": 0, "priority": 0},
        {"op": "insert", "tokens": _KEY[:80] + list(range(200, 220)), "ns": 0, "priority": 0},
        {"op": "insert", "tokens": _KEY[:80], "ns": 0, "priority": 0},
        {"op": "match", "tokens": _KEY[:96] + [300, 301, 302, 303], "ns": 0}]}
MUTANT = "kvfuzz.impl.unified.own_nodes_mutants:split_child_stale_key@python_core+keeps_key"


# (every command here declared at import, run once a run per release with every other file's
# commands on it: tests/radix/release_batch.py)
OWN_NODES = release_batch.on("0.5.11", (
    "diff", "unified", "--impl", "sglang.unified.python", "--impl", MUTANT, "--cases", "2",
    "--timeout", "200", "--corpus", OWN_CORPUS), (
    "diff", "unified", "--impl", "sglang.unified.rust", "--cases", "1"), (
    "diff", "unified", "--impl", "sglang.unified.mamba.python", "--cases", "4"), (
    "replay", Trace.of("branch_before_match.json", BRANCH_BEFORE_MATCH), "--impl",
    "sglang.unified.mamba.python"))


def test_0_5_11_agrees_on_its_own_nodes_and_a_stale_edge_is_caught(tmp_path_factory):
    done, rust, mamba, branch = OWN_NODES.results(tmp_path_factory)
    text = done.stdout + done.stderr
    assert done.returncode == 1, text[-3000:]  # the mutant's divergence
    found = {m.group(1): m.group(2).split() for m in
             re.finditer(r"^  (\S*unified\S*)\s+(\d.*)$", text, re.M)}
    assert found["sglang.unified.python"][:4] == ["2", "2", "0", "no"], text[-3000:]
    assert found[MUTANT][3] == "yes", text[-3000:]
    assert "is filed under edge" in text  # the stale edge, read from the nodes
    assert "finish cached" in text and "checkpoint" in text
    assert "not supported" not in text
    line = rust.stdout + rust.stderr
    assert rust.returncode == 2 and "UnifiedRadixCache has no tree core" in line, line[-2000:]
    # The Mamba entry, its judge's grid read from the cache built (0.5.11's chunk size is
    # max(64, page), not the 4 kvfuzz asks for): its fourth trace diverged on the grid asked.
    line = mamba.stdout + mamba.stderr
    assert mamba.returncode == 0, line[-3000:]
    agreed = r"^  sglang\.unified\.mamba\.python\s+4\s+4\s+0\s+no"
    assert re.search(agreed, line, re.M), line[-3000:]
    # 0.5.11 names a branching point before the match (64, the match ending at 80): its rule,
    # read from its source (`branches_before_match`), where 0.5.23's wants None
    line = branch.stdout + branch.stderr
    assert branch.returncode == 0 and "no divergence" in line, line[-3000:]


# SGLang 0.5.12 raises a node's hit count only for HiCache's write through
# (`_inc_hit_count` returns where there is no cache controller): read from the source as no hit
# counts. Before, 0.5.12 diverged on both of these (the table's shrunk files): "node [2 5 3]: hits
# expected 1, actual 0" at its first insert, and the same at a finish.
FIRST_INSERT = {"format": "kvfuzz-unified-trace/1", "components": "full", "page_size": 1,
                "size": 3, "policy": "mru", "events": False,
                "ops": [{"op": "insert", "tokens": [2, 5, 3], "ns": 0, "priority": 2}]}
_PROMPT = [3, 4, 3, 1, 5, 2, 5, 1, 2, 2, 2, 5, 4, 3, 4, 2, 3, 3, 5]
FINISH = {"format": "kvfuzz-unified-trace/1", "components": "full", "page_size": 8, "size": 24,
          "policy": "filo", "events": False, "ops": [
              {"op": "admit", "rid": 4, "tokens": _PROMPT, "prompt": 19, "ns": 0, "priority": 0},
              {"op": "extend", "rid": 4, "count": 19},
              {"op": "finish", "rid": 4, "cache": True}]}


NO_HITS = release_batch.on("0.5.12", *(
    ("replay", Trace.of(f"{name}.json", trace), "--impl", "sglang.unified.python")
    for name, trace in (("first_insert", FIRST_INSERT), ("finish", FINISH))))


def test_0_5_12_counts_no_hits_without_hicache(tmp_path_factory):
    for result in NO_HITS.results(tmp_path_factory):
        text = result.stdout + result.stderr
        assert result.returncode == 0 and "no divergence" in text, text[-3000:]
        assert "hits expected" not in text


def _agreed(result, entry: str, cases: int) -> None:
    text = result.stdout + result.stderr
    assert result.returncode == 0 and "not supported" not in text, text[-3000:]
    assert re.search(rf"^  {re.escape(entry)}\s+{cases}\s+{cases}\s+0\s+0", text, re.M), \
        text[-3000:]


def swa_diff(version: str, env: dict | None = None) -> release_batch.Commands:
    return release_batch.on(version, (
        "diff", "unified", "--impl", "sglang.unified.swa.python", "--cases", "3",
        "--keep-going", "--timeout", "200"), env=env)


SWA_0_5_11 = swa_diff("0.5.11")


def test_the_swa_entry_runs_on_0_5_11s_own_nodes(tmp_path_factory):
    """Before: `not supported: ... SWA component is slid by the scheduler` (one line); then, run,
    the SWA lock dropped without its mark (`release_component_lock(swa) on node with
    lock_ref=0`) and the SWA cursor read off `kv` where 0.5.11 writes it on the request."""
    swa, = SWA_0_5_11.results(tmp_path_factory)
    _agreed(swa, "sglang.unified.swa.python", 3)


SWA_0_5_14 = swa_diff("0.5.14")
# (set for that command alone: 0.5.14 reads it when its checkpoint runs, `envs.X.get()`)
SWA_0_5_14_FREED = swa_diff("0.5.14", {"SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS": "1"})


def test_0_5_14s_window_free_with_its_extra_page(tmp_path_factory):
    """0.5.14's checkpoint frees the window only where SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_
    WINDOW_SLOTS says so (False by default: `swa cursor ... expected 1` before the judge was
    told), and then keeps a page past the window (`SWA_PAGE_MARGIN`)."""
    default, = SWA_0_5_14.results(tmp_path_factory)
    _agreed(default, "sglang.unified.swa.python", 3)
    freed, = SWA_0_5_14_FREED.results(tmp_path_factory)
    _agreed(freed, "sglang.unified.swa.python", 3)
    assert "swa cursor moved at a checkpoint" in freed.stdout + freed.stderr


CORE_0_5_17 = release_batch.on("0.5.17", *(
    ("diff", "unified", "--impl", entry, "--cases", "3", "--keep-going", "--timeout", "200")
    for entry in ("sglang.unified.python", "sglang.unified.swa.python")))


def test_0_5_17s_python_core_is_read(tmp_path_factory):
    """0.5.17's core has no read-only walk (`match_full_device_prefix`) and its cache no
    `_tree_core_backend`: every trace crashed at its first op."""
    full, swa = CORE_0_5_17.results(tmp_path_factory)
    _agreed(full, "sglang.unified.python", 3)
    _agreed(swa, "sglang.unified.swa.python", 3)


# 0.5.15's and 0.5.16's InsertResult carries a last_device_node their cache leaves None: the
# Mamba entry never named the insert's node ("evictable_size() says 4, its unlocked nodes hold
# 0" at this trace's one op, shrunk from seeded trace 0 on 0.5.15)
MAMBA_INSERT = {"format": "kvfuzz-unified-trace/1", "components": "full+mamba", "mamba_slots": 7,
                "page_size": 4, "size": 4, "policy": "priority", "events": False,
                "ops": [{"op": "insert", "tokens": [3, 2, 1, 1, 5, 1], "ns": 0, "priority": 0}]}


MAMBA_INSERT_0_5_15 = release_batch.on("0.5.15", (
    "replay", Trace.of("mamba_insert.json", MAMBA_INSERT), "--impl", "sglang.unified.mamba.python"))


def test_0_5_15s_mamba_insert_names_its_node(tmp_path_factory):
    done, = MAMBA_INSERT_0_5_15.results(tmp_path_factory)
    text = done.stdout + done.stderr
    assert done.returncode == 0 and "no divergence" in text, text[-3000:]
