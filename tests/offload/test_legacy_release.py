"""vLLM's CPU offloading manager as 0.29, 0.30 and 0.31 shipped it, for real (slow): each release
first on the path of one process running `kvfuzz`'s commands (tests/radix/test_legacy_release.py's
`kvfuzz_commands`), as a user's `PYTHONPATH=<release> kvfuzz ...` has it, judged
by its release's contract (oracle/offload/contract.py, read from its classes). Finding R's saved
trace (`corpus/history/vllm-0.29.0/`: ARC refuses a store while T1 holds an evictable chunk)
diverges on 0.29 and replays clean on 0.30; finding S's (`corpus/history/vllm-0.30.0/`: a stored
key offered again under the store threshold evicted by that offer) diverges on 0.30 and replays
clean on the released 0.33 (it was fixed in 0.31: docs/release-history.md); 0.30's classes (no
request hooks, the threshold counted per offer) and 0.29's (counted per key) agree on seeded
traces; 0.31's (request hooks, no request positions, no failed store's event) agree on them and
on K's two files, and a mutant of its LRU is caught in process (`test_0_31_...`). Three
releases only: a vLLM release is some 400 MB to fetch and 800 MB installed, where an SGLang one
is 7 and 180, and CI fetches what these tests name. 0.28's per-lookup counting is
checked against fakes in test_legacy_contract.py. Each release is installed as `kvfuzz history`
installs it (a no-op where it is there already); without the release in the cache nor a
registry, the test skips and says so."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.history import releases
from kvfuzz.fuzz.history.releases import Release
from tests.conftest import CORPUS
from tests.helpers import kvfuzz_here, needs_engine
from tests.radix.test_legacy_release import kvfuzz_commands

pytestmark = needs_engine("vllm")  # slow, and the lock's packages the release imports

R = CORPUS / "history" / "vllm-0.29.0" / "offload-daf52043def4e46f.json"
S = CORPUS / "history" / "vllm-0.30.0" / "offload-5449299b12c04f83.json"


def folder_of(version: str):
    try:
        return releases.install(Release("vllm", version))
    except releases.ReleaseError as error:  # no registry here: said, not failed
        pytest.skip(f"cannot install vllm {version}: {error}")


def test_0_29_diverges_on_finding_r_and_agrees_on_seeded_traces(tmp_path):
    # One process for the release's commands (its vLLM imported once).
    r_old, seeded = kvfuzz_commands(folder_of("0.29.0"),
                                    ("replay", R, "--impl", "vllm.offload.arc"),
                                    SEEDED + ("--corpus", tmp_path))
    assert r_old.returncode == 1, r_old.stdout[-2000:] + r_old.stderr[-2000:]
    assert "prepare_store: expected ([(1004, 0)], [(1003, 0)]), actual None" in \
        r_old.stdout + r_old.stderr
    assert_agrees(seeded)


def test_0_30_replays_r_clean_diverges_on_finding_s_and_agrees_on_seeded_traces(tmp_path):
    r_fixed, s_old, seeded = kvfuzz_commands(
        folder_of("0.30.0"), ("replay", R, "--impl", "vllm.offload.arc"),
        ("replay", S, "--impl", "vllm.offload.lru"), SEEDED + ("--corpus", tmp_path))
    assert r_fixed.returncode == 0, r_fixed.stdout[-2000:] + r_fixed.stderr[-2000:]
    assert s_old.returncode == 1, s_old.stdout[-2000:] + s_old.stderr[-2000:]
    assert "prepare_store evicted (1001, 0) while it was offered in this call" in \
        s_old.stdout + s_old.stderr
    assert_agrees(seeded)


def test_finding_s_replays_clean_on_the_release():
    fixed = kvfuzz_here("replay", S, "--impl", "vllm.offload.lru")  # 0.33 as locked; 0.31 fixed it
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]


# K's files: 0.33's LRU order by position and its failed store's event, which 0.31 and 0.32
# lack (a change of policy): clean there under their own contract, as on 0.33.
K = [CORPUS / "offload-f857e84050b2c49d.json", CORPUS / "offload-56a03752478bd9f3.json"]
# 0.31's LRU, then a mutant of it (touch in order: the last key ends most recent), in process:
# one process, its vLLM imported once, replays the file on each; [status, output] of each.
TOUCH_IN_ORDER = """
import contextlib, importlib, io, json, sys
from kvfuzz.fuzz.cli.main import main
from kvfuzz.impl.upstream_env import prepare_import
with prepare_import("vllm.v1.kv_offload.cpu.policies.lru"):
    lru = importlib.import_module("vllm.v1.kv_offload.cpu.policies.lru")
results = []
for kind in ("release", "mutant"):
    if kind == "mutant":  # patched after the release's replay: its class, its instances' calls
        lru.LRUCachePolicy.touch = lambda self, keys, req_context: self._update_recency(list(keys))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = main(["replay", sys.argv[1], "--impl", "vllm.offload.lru", "--in-process"])
    results.append([status, out.getvalue()])
print(json.dumps(results))
"""


def test_0_31_replays_k_clean_agrees_on_seeded_traces_and_catches_a_mutant(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from tests.offload.test_early_release import TOUCHED
    from tests.radix.test_legacy_release import SESSION

    folder = folder_of("0.31.0")
    path = tmp_path / "touched.json"
    path.write_text(json.dumps(TOUCHED))
    # kvfuzz_commands' session, then TOUCH_IN_ORDER in the same process once its commands are
    # done (the mutant patched after them): 0.31's vLLM imported once, not twice (some 10 s)
    argvs = [[str(arg) for arg in argv] for argv in (
        ("replay", K[0], "--impl", "vllm.offload.lru"),
        ("replay", K[1], "--impl", "vllm.offload.lru"), SEEDED + ("--corpus", tmp_path))]
    out_file = tmp_path / "results.json"
    script = SESSION + "\nsys.argv[1:] = sys.argv[3:]\n" + TOUCH_IN_ORDER
    env = dict(os.environ, PYTHONPATH=f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    done = subprocess.run([sys.executable, "-c", script, json.dumps(argvs), str(out_file),
                           str(path)], env=env, capture_output=True, text=True, timeout=580)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    k_lru, k_event, seeded = [subprocess.CompletedProcess(argv, status, out, err) for argv,
                              (status, out, err) in zip(argvs, json.loads(out_file.read_text()))]
    for ran in (k_lru, k_event):
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert_agrees(seeded)
    (released, released_out), (mutant, mutant_out) = json.loads(done.stdout.splitlines()[-1])
    assert released == 0, released_out[-2000:]
    assert mutant == 1, mutant_out[-2000:]
    assert "policy order at op 3 of 4: touch r1 chunks [0:3)" in mutant_out


# 0.30's classes have no request hooks and count the threshold per offer, 0.29's per key.
SEEDED = ("diff", "offload", "--impl", "vllm.offload.lru", "--cases", "4")


def assert_agrees(done) -> None:
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "ran to the last op: 4/4" in text and "not supported" not in text
