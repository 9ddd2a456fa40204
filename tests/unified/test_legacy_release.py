"""`UnifiedRadixCache` of SGLang 0.5.20 and 0.5.21 for real (slow), driven through their own
scheduler calls (impl/radix/legacy.py, the unified driver's reads of those releases), each
release first on the path of the process running `kvfuzz` as a user's does
(`tests.radix.test_legacy_release.kvfuzz_commands`, once a run for every file's commands on the
release: tests/radix/release_batch.py), installed as
tests/radix/test_legacy_release.py installs it (the wheel cache, else the registry; skipped, and
said, only without either): each core agrees on seeded traces that reach chunk checkpoints and
finishes (0.5.21: the Rust core with the Python core beside it; 0.5.20: the Python core, every
node's hit count, priority and times compared, the core chosen by the environment), and a
mutant of the full-attention component or of the tree core diverges on the same release; the
SWA and Mamba entries agree there too, and a mutant of each component diverges; finding U's
saved trace (`corpus/history/sglang-0.5.20/`: a chunk's SWA window leaves its leaf less than a
window, the rematch ends above it, and the request's own KV is the tree's, unlocked) diverges
on 0.5.20 and replays clean on 0.5.23, which fixed it."""

from __future__ import annotations

import re

from tests.conftest import CORPUS
from tests.helpers import kvfuzz_here, needs_engine
from tests.radix import release_batch

pytestmark = needs_engine("sglang")  # slow, and the lock's packages it imports

U = CORPUS / "history" / "sglang-0.5.20" / "unified-a84330ea906d1671.json"


def rows(text: str) -> dict[str, list[str]]:
    """The summary's rows: entry -> [traces, agree, outside, diverged ("yes"/"no"), ...]."""
    return {m.group(1): m.group(2).split() for m in
            re.finditer(r"^  (\S*sglang\.unified\S*)\s+(\d.*)$", text, re.M)}


def mutant_diff(version: str, entry: str, mutant: str) -> release_batch.Commands:
    return release_batch.on(version, (
        "diff", "unified", "--impl", entry, "--impl", f"mutant.sglang.unified.{mutant}",
        "--cases", "2", "--timeout", "200", "--corpus", release_batch.OWN_CORPUS))


# (declared at import, run once a run per release with every other file's commands on it:
# tests/radix/release_batch.py)
RUST_0_5_21 = mutant_diff("0.5.21", "sglang.unified.rust", "lock_leaf_twice")
PYTHON_0_5_20 = mutant_diff("0.5.20", "sglang.unified.python", "split_child_stale_key")
# (without the adapter each entry was one line there: "not supported ... no trace model")
PAIRS = (("sglang.unified.swa.python", "swa_window_keeps_a_page_more"),
         ("sglang.unified.mamba.rust", "mamba_exist_unsaid"))
COMPONENTS_0_5_21 = [mutant_diff("0.5.21", entry, mutant) for entry, mutant in PAIRS]
U_OLD = release_batch.on("0.5.20", ("replay", U, "--impl", "sglang.unified.swa.python"))


def run(commands: release_batch.Commands, tmp_path_factory) -> str:
    done, = commands.results(tmp_path_factory)
    text = done.stdout + done.stderr
    assert done.returncode == 1, text[-3000:]  # the mutant's divergence
    return text


def test_0_5_21_agrees_on_the_rust_core_and_a_doubled_lock_is_caught(tmp_path_factory):
    text = run(RUST_0_5_21, tmp_path_factory)
    found = rows(text)
    assert found["sglang.unified.rust"][:4] == ["2", "2", "0", "no"], text[-3000:]
    assert found["mutant.sglang.unified.lock_leaf_twice"][3] == "yes"
    assert "tree core: rust on 2 of 2" in text and "finish cached" in text


def test_0_5_20_agrees_on_the_python_core_and_a_stale_edge_is_caught(tmp_path_factory):
    text = run(PYTHON_0_5_20, tmp_path_factory)
    found = rows(text)
    assert found["sglang.unified.python"][:4] == ["2", "2", "0", "no"], text[-3000:]
    assert found["mutant.sglang.unified.split_child_stale_key"][3] == "yes"
    assert "tree core kvfuzz-mutant-split_child_stale_key" in text  # its core, by environment
    assert "finish cached" in text


def test_0_5_21s_swa_and_mamba_entries_agree_and_a_mutant_of_each_component_is_caught(
        tmp_path_factory):
    swa, mamba = (commands.results(tmp_path_factory)[0] for commands in COMPONENTS_0_5_21)
    for done, (entry, mutant) in zip((swa, mamba), PAIRS):
        text = done.stdout + done.stderr
        assert done.returncode == 1, text[-3000:]  # the mutant's divergence
        found = rows(text)
        assert found[entry][:4] == ["2", "2", "0", "no"], text[-3000:]
        assert found[f"mutant.sglang.unified.{mutant}"][3] == "yes", text[-3000:]
    assert "finish cached" in swa.stdout + swa.stderr
    assert "swa cursor moved at a checkpoint" in swa.stdout + swa.stderr


def test_finding_u_diverges_on_0_5_20_and_replays_clean_on_0_5_23(tmp_path_factory):
    old, = U_OLD.results(tmp_path_factory)
    text = old.stdout + old.stderr
    assert old.returncode == 1, text[-2000:]
    assert "allocator at op 3 of 4: checkpoint r1" in text and "16 tokens counted twice" in text
    assert "r1's SWA cursor went from 0 to 8 at its checkpoint, expected 4" in text
    assert "the nodes hold 0" not in text  # the insert's nodes named, though the lock is above
    # 0.5.23 is the locked release: replayed here, not installed again as a history folder
    fixed = kvfuzz_here("replay", U, "--impl", "sglang.unified.swa.python", "--impl",
                        "sglang.unified.swa.rust")
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]

