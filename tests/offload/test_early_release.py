"""vLLM 0.20's CPU offloading manager for real (slow), the earliest release kvfuzz drives and the
one that lacks most (abstract.py for base.py, a ReqContext without req_id, touch and the
completions without a request context, no store threshold, no reset, no request calls, no
stats, a lookup of bools, the LRU of one list): driven under its own contract
(oracle/offload/contract.py, read from its classes), where it was one "not supported" line.
Seeded LRU traces agree; finding R's saved trace (ARC, `corpus/history/vllm-0.29.0/`) diverges
there as on 0.24-0.29 (the same `evict`); and a mutant of its LRU (touch in order, the last key
most recent) is caught on a four-op trace, replayed in process with the policy's `touch`
replaced. Skipped, with the reason, where the release is not in kvfuzz's history cache (this
test installs nothing: a vLLM release is some 800 MB installed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvfuzz.fuzz.history import releases
from kvfuzz.fuzz.history.releases import Release
from tests.conftest import CORPUS
from tests.helpers import needs_engine
from tests.radix.test_legacy_release import kvfuzz_commands

pytestmark = needs_engine("vllm")  # slow, and the lock's packages the release imports

R = CORPUS / "history" / "vllm-0.29.0" / "offload-daf52043def4e46f.json"
RELEASE = Release("vllm", "0.20.0")


def folder():
    if not releases.installed(RELEASE):
        pytest.skip(f"vllm {RELEASE.version} is not in {releases.folder(RELEASE)}")
    return releases.folder(RELEASE)


def test_0_20_agrees_on_seeded_traces_and_diverges_on_finding_r(tmp_path):
    seeded, r_old = kvfuzz_commands(
        folder(), ("diff", "offload", "--impl", "vllm.offload.lru", "--cases", "4", "--corpus",
                   tmp_path), ("replay", R, "--impl", "vllm.offload.arc"))
    text = seeded.stdout + seeded.stderr
    assert seeded.returncode == 0, text[-3000:]
    assert "ran to the last op: 4/4" in text and "not supported" not in text
    assert r_old.returncode == 1, r_old.stdout[-2000:] + r_old.stderr[-2000:]
    assert "prepare_store: expected ([(1004, 0)], [(1003, 0)]), actual None" in \
        r_old.stdout + r_old.stderr


# Three chunks stored, then touched: 0.20's LRU moves them last first, (1003, 0) ends oldest.
TOUCHED = {"format": "kvfuzz-offload-trace/1", "policy": "lru", "chunks": 3, "groups": 1,
           "events": False, "store_threshold": 1, "tracker_size": 4,
           "ops": [{"op": "new", "rid": 1, "hashes": [1001, 1002, 1003]},
                   {"op": "store", "rid": 1, "start": 0, "stop": 3},
                   {"op": "complete_store", "rid": 1, "success": True},
                   {"op": "touch", "rid": 1, "start": 0, "stop": 3}]}
IN_PROCESS = """
import importlib, sys
from kvfuzz.fuzz.cli.main import main
from kvfuzz.impl.upstream_env import prepare_import
with prepare_import("vllm.v1.kv_offload.cpu.policies.lru"):
    lru = importlib.import_module("vllm.v1.kv_offload.cpu.policies.lru")
def touch_in_order(self, keys):  # the mutant: the last key ends most recent
    for key in keys:
        if key in self.blocks:
            self.blocks.move_to_end(key)
if sys.argv[2] == "mutant":
    lru.LRUCachePolicy.touch = touch_in_order
sys.exit(main(["replay", sys.argv[1], "--impl", "vllm.offload.lru", "--in-process"]))
"""


def test_a_mutant_of_0_20_s_lru_is_caught_and_the_release_is_not(tmp_path):
    path = tmp_path / "touched.json"
    path.write_text(json.dumps(TOUCHED))
    env = dict(os.environ, PYTHONPATH=f"{folder()}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    done = {kind: subprocess.run([sys.executable, "-c", IN_PROCESS, str(path), kind], env=env,
                                 capture_output=True, text=True, timeout=300)
            for kind in ("release", "mutant")}
    released, mutant = done["release"], done["mutant"]
    assert released.returncode == 0, released.stdout[-2000:] + released.stderr[-2000:]
    assert mutant.returncode == 1, mutant.stdout[-2000:] + mutant.stderr[-2000:]
    assert "policy order at op 3 of 4: touch r1 chunks [0:3)" in mutant.stdout + mutant.stderr
