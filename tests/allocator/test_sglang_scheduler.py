"""SGLang's own Scheduler as a real client of its token-to-KV-pool allocator
(fuzz/allocator/sglang_session.py, run by sglang_scheduler.py's command): each session in a
process of its own (SGLang builds its parallel groups once per process; forked from one that
imported SGLang: conftest's `sglang_server`), its allocator's calls counted, guarded
(`kvfuzz.guard(allocator, "allocator")`) or recorded. Skips without SGLang."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kvfuzz
from kvfuzz.fuzz.allocator.sglang_scheduler import session_in_subprocess
from kvfuzz.fuzz.engine import corpus
from tests.helpers import needs_engine

pytestmark = needs_engine("sglang")


def _allocation_paths(calls: dict, page_size_one: bool) -> bool:
    """The paged allocator's two allocation paths (prefill chunks and decode steps), or at page
    size 1 TokenToKVPoolAllocator's one path for both."""
    if page_size_one:
        return calls.get("alloc", 0) > 0
    return calls.get("alloc_extend", 0) > 0 and calls.get("alloc_decode", 0) > 0 \
        and "alloc" not in calls


@pytest.mark.parametrize("seed, options, released", [
    (0, ["--retract"], "sglang.paged"),
    (2, ["--page-size", "1", "--retract"], "sglang.token"),
], ids=["paged", "token"])
def test_the_released_allocator_runs_guarded_in_sglangs_scheduler(seed, options, released,
                                                                 tmp_path, sglang_server):
    """Hundreds of the scheduler's calls checked in lock step, 0 divergences, every request
    finished, retractions forced, both allocation paths taken; the recording of the same
    session (the guard records what it checks) replays clean on the released class."""
    guarded = session_in_subprocess(seed, [*options, "--guard", "--corpus", str(tmp_path),
                                           "--record", str(tmp_path / "rec")],
                                    server=sglang_server)
    assert "divergence" not in guarded, guarded.get("divergence", {}).get("report")
    assert guarded["finished"] == guarded["requests"] > 0 and guarded["retractions"] > 0
    assert _allocation_paths(guarded["calls"], "--page-size" in options)
    assert guarded["ops"] > 150
    assert kvfuzz.replay(guarded["saved"], released).ok
    assert not list(tmp_path.glob("*.json"))  # nothing diverged: nothing saved


def test_a_guarded_mutant_raises_in_sglangs_scheduler_with_a_file_that_replays(tmp_path,
                                                                              sglang_server):
    """The mutant the scheduler's traffic reaches (its releases append, SGLang's token class
    appends at the tail: this one prepends). The others need need_sort, clear(), or an
    allocation the scheduler's budget never lets through (docs/upstream-sglang.md)."""
    name = "mutant.sglang.token.free_prepends"
    line = session_in_subprocess(0, ["--page-size", "1", "--retract", "--guard", "--corpus",
                                     str(tmp_path), "--impl", name],
                                 server=sglang_server)
    found = line["divergence"]
    assert found["impl"] == name and "replay    kvfuzz replay " in found["report"]
    again = kvfuzz.replay(found["saved"], name).divergences
    assert [list(d.signature) for d in again] == [found["signature"]]
    assert kvfuzz.replay(found["saved"], "sglang.token").ok


RECORDED = "allocator-68598df29eb4eeec.json"  # session 1, retractions forced, page size 16


def test_the_corpus_holds_a_recorded_sglang_session_that_replays_clean(tmp_path, sglang_server):
    """The committed recording is what the scheduler records now (its forward runs dummy
    weights, seeded: the session is deterministic), and SGLang's class runs it clean."""
    from tests.conftest import CORPUS

    line = session_in_subprocess(1, ["--retract", "--record", str(tmp_path)],
                                 server=sglang_server)
    assert Path(line["saved"]).name == RECORDED, "regenerate: python -m kvfuzz.fuzz." \
        "allocator.sglang_scheduler --seed 1 --retract --record corpus"
    _, saved = corpus.load(Path(CORPUS) / RECORDED)
    assert saved.note == corpus.load(line["saved"])[1].note
    assert kvfuzz.replay(Path(CORPUS) / RECORDED, "sglang.paged").ok


def test_kvfuzz_guard_allocator_switches_it_on_inside_an_unchanged_engine(tmp_path):
    """SGLang builds its allocator by name in kv_cache_configurator: under `kvfuzz guard
    allocator`, the session's allocator comes back guarded with nothing asked of the script."""
    command = [sys.executable, "-m", "kvfuzz.fuzz.cli", "guard", "allocator", "--corpus",
               str(tmp_path), "--", sys.executable, "-m",
               "kvfuzz.fuzz.allocator.sglang_scheduler", "--seed", "0"]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).parents[2])
    assert ran.returncode == 0, ran.stderr[-3000:]
    line = json.loads(ran.stdout.strip().splitlines()[-1])
    assert line["wrapped"] == "GuardedAllocator" and line["ops"] > 150
    assert line["finished"] == line["requests"] and not list(tmp_path.glob("*.json"))
