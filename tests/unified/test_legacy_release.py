"""`UnifiedRadixCache` of SGLang 0.5.20 and 0.5.21 for real (slow), driven through their own
scheduler calls (impl/radix/legacy.py, the unified driver's reads of those releases), each
release first on the path of the process running `kvfuzz` as a user's does
(`tests.radix.test_legacy_release.kvfuzz_commands`), installed as
tests/radix/test_legacy_release.py installs it (the wheel cache, else the registry; skipped, and
said, only without either): each core agrees on seeded traces that reach chunk checkpoints and
finishes (0.5.21: the Rust core with the Python core beside it; 0.5.20: the Python core, every
node's hit count, priority and times compared, the core chosen by the environment), and a
mutant of the full-attention component or of the tree core diverges on the same release."""

from __future__ import annotations

import re

from tests.helpers import needs_engine
from tests.radix.test_legacy_release import folder_of, kvfuzz_commands

pytestmark = needs_engine("sglang")  # slow, and the lock's packages it imports


def rows(text: str) -> dict[str, list[str]]:
    """The summary's rows: entry -> [traces, agree, outside, diverged ("yes"/"no"), ...]."""
    return {m.group(1): m.group(2).split() for m in
            re.finditer(r"^  (\S*sglang\.unified\S*)\s+(\d.*)$", text, re.M)}


def run(version: str, entry: str, mutant: str, tmp_path) -> str:
    done, = kvfuzz_commands(folder_of(version), (
        "diff", "unified", "--impl", entry, "--impl", f"mutant.sglang.unified.{mutant}",
        "--cases", "2", "--timeout", "200", "--corpus", tmp_path))
    text = done.stdout + done.stderr
    assert done.returncode == 1, text[-3000:]  # the mutant's divergence
    return text


def test_0_5_21_agrees_on_the_rust_core_and_a_doubled_lock_is_caught(tmp_path):
    text = run("0.5.21", "sglang.unified.rust", "lock_leaf_twice", tmp_path)
    found = rows(text)
    assert found["sglang.unified.rust"][:4] == ["2", "2", "0", "no"], text[-3000:]
    assert found["mutant.sglang.unified.lock_leaf_twice"][3] == "yes"
    assert "tree core: rust on 2 of 2" in text and "finish cached" in text


def test_0_5_20_agrees_on_the_python_core_and_a_stale_edge_is_caught(tmp_path):
    text = run("0.5.20", "sglang.unified.python", "split_child_stale_key", tmp_path)
    found = rows(text)
    assert found["sglang.unified.python"][:4] == ["2", "2", "0", "no"], text[-3000:]
    assert found["mutant.sglang.unified.split_child_stale_key"][3] == "yes"
    assert "tree core kvfuzz-mutant-split_child_stale_key" in text  # its core, by environment
    assert "finish cached" in text
