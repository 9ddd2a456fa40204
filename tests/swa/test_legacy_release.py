"""SGLang's SWATokenToKVPoolAllocator before 0.5.19 for real (slow): a release without
`free_full` driven through the calls of its day (impl/swa/legacy.py, the oracle's old contract in
oracle/swa/contract.py), each release first on the path of a process running `kvfuzz`'s commands
as a user's `PYTHONPATH=<release> kvfuzz ...` does (tests/radix/test_legacy_release.py's
`kvfuzz_commands`, one process a release for every file's commands on it:
tests/radix/release_batch.py). Finding F's saved trace diverges on 0.5.17 through
one `free` of the whole row and replays clean on 0.5.20 (the fix); finding T's on 0.5.10 and
clean on 0.5.11; and a trace of windows moved and rows released, at page sizes 1 and 2, agrees
on 0.5.17. Without the
adapter each release is one "not supported" line (exit status 2), and every test here fails.
Each release is installed from kvfuzz's wheel cache or the registry; only without either does
the test skip, and say so."""

from __future__ import annotations

from tests.conftest import CORPUS
from tests.helpers import needs_engine
from tests.radix import release_batch

pytestmark = needs_engine("sglang")  # slow, and the lock's packages it imports

F = CORPUS / "history" / "sglang-0.5.19" / "swa-2a3bbb37db7d167b.json"
T = CORPUS / "history" / "sglang-0.5.10" / "swa-31780f9cead4fc76.json"


# (declared at import, run once a run per release with every other file's commands on it:
# tests/radix/release_batch.py)
T_OLD = release_batch.on("0.5.10", ("replay", T, "--impl", "sglang.swa"))
T_FIXED = release_batch.on("0.5.11", ("replay", T, "--impl", "sglang.swa"))


def test_finding_t_diverges_on_0_5_10_and_not_on_0_5_11(tmp_path_factory):
    old, = T_OLD.results(tmp_path_factory)
    text = old.stdout + old.stderr
    assert old.returncode == 1 and "None vs success at op 7 of 8" in text, text[-2000:]
    fixed, = T_FIXED.results(tmp_path_factory)
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]


def rows_released(page_size: int) -> dict:
    """Requests whose windows move (outside a free group and inside one), then released with
    their passed tokens, which have no SWA peer."""
    ops = [{"op": "admit", "rid": 1}, {"op": "extend", "rids": [1], "lens": [7]},
           {"op": "evict", "rid": 1, "keep": 1}, {"op": "decode", "rids": []},
           {"op": "admit", "rid": 2}, {"op": "extend", "rids": [2], "lens": [5]},
           {"op": "group_begin"}, {"op": "evict", "rid": 2, "keep": 2},
           {"op": "decode", "rids": []}, {"op": "group_end"},
           {"op": "finish", "rid": 1}, {"op": "decode", "rids": []},
           {"op": "evict", "rid": 2, "keep": 1}, {"op": "finish", "rid": 2},
           {"op": "admit", "rid": 3}, {"op": "extend", "rids": [3], "lens": [9]},
           {"op": "evict", "rid": 3, "keep": 3}, {"op": "finish", "rid": 3}]
    return {"format": "kvfuzz-swa-trace/1", "page_size": page_size, "size": 32 * page_size,
            "size_swa": 16 * page_size, "need_sort": False, "ops": ops}


# 0.5.17's three commands: F's file, which diverges through one `free` of the whole row, and
# windows moved and rows released at page sizes 1 and 2, which agree. F's fix, 0.5.20, replays
# the file clean.
F_OLD = release_batch.on("0.5.17", ("replay", F, "--impl", "sglang.swa"))
RELEASED = release_batch.on("0.5.17", *(
    ("replay", release_batch.Trace.of(f"swa-rows-{page_size}.json", rows_released(page_size)),
     "--impl", "sglang.swa") for page_size in (1, 2)))
F_FIXED = release_batch.on("0.5.20", ("replay", F, "--impl", "sglang.swa"))


def test_0_5_17_diverges_on_finding_f_and_agrees_on_windows_and_rows_released(tmp_path_factory):
    old, = F_OLD.results(tmp_path_factory)
    text = old.stdout + old.stderr
    assert old.returncode == 1, text[-2000:]
    assert "mapping at op 3 of 4: finish r2" in text and "free([2, 3, 4]) (the whole row" in text
    for page_size, done in zip((1, 2), RELEASED.results(tmp_path_factory)):
        text = done.stdout + done.stderr
        assert done.returncode == 0 and "no divergence" in text, (page_size, text[-3000:])
    fixed, = F_FIXED.results(tmp_path_factory)
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]
