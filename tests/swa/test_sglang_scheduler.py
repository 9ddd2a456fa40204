"""SGLang's own Scheduler with a hybrid sliding-window model as a real client of its
`SWATokenToKVPoolAllocator` (fuzz/allocator/sglang_session.py with `--swa`: a tiny Mellum, every
other layer windowed), each session in a process of its own (forked from one that imported
SGLang: conftest's `sglang_server`), the allocator guarded
(`kvfuzz.guard(allocator, "swa")`) or recorded. Skips without SGLang."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kvfuzz
from kvfuzz.fuzz.allocator.sglang_scheduler import session_in_subprocess
from tests.helpers import needs_engine

pytestmark = needs_engine("sglang")


@pytest.mark.parametrize("seed, options", [
    (2, ["--retract"]), (3, ["--page-size", "1", "--retract"]),
], ids=["paged", "page-size-1"])
def test_the_released_swa_allocator_runs_guarded_in_sglangs_scheduler(seed, options, tmp_path,
                                                                      sglang_server):
    """Hundreds of the scheduler's, its radix cache's and its model runner's calls checked in
    lock step, retractions among them, 0 divergences; the recording of the same session (the
    guard records what it checks) replays clean on the released class."""
    guarded = session_in_subprocess(seed, [*options, "--swa", "--guard", "--corpus",
                                           str(tmp_path), "--record", str(tmp_path / "r")],
                                    server=sglang_server)
    assert "divergence" not in guarded, guarded.get("divergence", {}).get("report")
    assert guarded["wrapped"] == "GuardedSWA" and guarded["tree_core"] == "RustUnifiedTreeCore"
    assert guarded["finished"] == guarded["requests"] and guarded["retractions"] > 0
    assert guarded["ops"] > 300
    # the window's releases, by segment, inside the scheduler's free groups
    assert guarded["calls"]["free_swa_segment"] > 0 and guarded["calls"]["free_group_end"] > 0
    assert kvfuzz.replay(guarded["saved"], "sglang.swa").ok  # the guard records what it checks
    assert not list(tmp_path.glob("*.json"))  # nothing diverged: nothing saved


@pytest.mark.parametrize("name", ["mutant.sglang.swa.group_skips_full_side",
                                  "mutant.sglang.swa.segment_unmaps_representatives"])
def test_a_guarded_mutant_raises_in_sglangs_scheduler_with_a_file_that_replays(name, tmp_path,
                                                                               sglang_server):
    """The mutants the scheduler's traffic reaches at page size 16; the others need calls it
    does not make here (docs/upstream-sglang.md)."""
    line = session_in_subprocess(0, ["--swa", "--guard", "--corpus", str(tmp_path),
                                     "--impl", name],
                                 server=sglang_server)
    found = line["divergence"]
    assert found["impl"] == name and "replay    kvfuzz replay " in found["report"]
    again = kvfuzz.replay(found["saved"], name).divergences
    assert [list(d.signature) for d in again] == [found["signature"]]
    assert kvfuzz.replay(found["saved"], "sglang.swa").ok


def test_kvfuzz_guard_swa_switches_it_on_inside_an_unchanged_engine(tmp_path):
    """SGLang builds its SWA allocator by name in kv_cache_configurator and checks its class
    by that name: under `kvfuzz guard swa` the session's allocator comes back guarded, its
    checks pass, with nothing asked of the script."""
    command = [sys.executable, "-m", "kvfuzz.fuzz.cli", "guard", "swa", "--corpus",
               str(tmp_path), "--", sys.executable, "-m",
               "kvfuzz.fuzz.allocator.sglang_scheduler", "--seed", "0", "--swa"]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).parents[2])
    assert ran.returncode == 0, ran.stderr[-3000:]
    line = json.loads(ran.stdout.strip().splitlines()[-1])
    assert line["wrapped"] == "GuardedSWA" and line["ops"] > 300
    assert line["finished"] == line["requests"] and not list(tmp_path.glob("*.json"))


RECORDED = "swa-c017583218592870.json"  # session 2, retractions forced, page 16, Python core


def test_the_corpus_holds_a_recorded_sglang_swa_session_that_replays_clean(tmp_path, sglang_server):
    """The committed recording is what the scheduler records now (dummy weights, seeded, the
    tree's Python core, whose release order is fixed: the session is deterministic), and
    SGLang's class and kvfuzz's run it clean."""
    from kvfuzz.fuzz.engine import corpus
    from tests.conftest import CORPUS

    line = session_in_subprocess(2, ["--swa", "--retract", "--tree-core", "python", "--record",
                                     str(tmp_path)],
                                 server=sglang_server)
    assert line["tree_core"] == "UnifiedTreeCore"
    assert Path(line["saved"]).name == RECORDED, "regenerate: python -m kvfuzz.fuzz." \
        "allocator.sglang_scheduler --seed 2 --swa --retract --tree-core python --record corpus"
    assert corpus.load(Path(CORPUS) / RECORDED)[1].note == corpus.load(line["saved"])[1].note
    assert kvfuzz.replay(Path(CORPUS) / RECORDED, "sglang.swa").ok
    assert kvfuzz.replay(Path(CORPUS) / RECORDED, "swa.torch").ok
