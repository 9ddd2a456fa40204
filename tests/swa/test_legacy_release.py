"""SGLang's SWATokenToKVPoolAllocator before 0.5.19 for real (slow): a release without
`free_full` driven through the calls of its day (impl/swa/legacy.py, the oracle's old contract in
oracle/swa/contract.py), each release first on the path of a process running `kvfuzz`'s commands
as a user's `PYTHONPATH=<release> kvfuzz ...` does (tests/radix/test_legacy_release.py's
`kvfuzz_commands`). Finding F's saved trace diverges on 0.5.17 through one `free` of the whole
row and replays clean on 0.5.20 (the fix); finding T's on 0.5.10 and clean on 0.5.11; and a
trace of windows moved and rows released, at page sizes 1 and 2, agrees on 0.5.17. Without the
adapter each release is one "not supported" line (exit status 2), and every test here fails.
Each release is installed from kvfuzz's wheel cache or the registry; only without either does
the test skip, and say so."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CORPUS
from tests.helpers import needs_engine
from tests.radix.test_legacy_release import folder_of, kvfuzz_commands, kvfuzz_with

pytestmark = needs_engine("sglang")  # slow, and the lock's packages it imports

F = CORPUS / "history" / "sglang-0.5.19" / "swa-2a3bbb37db7d167b.json"
T = CORPUS / "history" / "sglang-0.5.10" / "swa-31780f9cead4fc76.json"


def test_finding_f_diverges_on_0_5_17_through_the_calls_of_its_day_and_not_on_0_5_20():
    old, = kvfuzz_commands(folder_of("0.5.17"), ("replay", F, "--impl", "sglang.swa"))
    text = old.stdout + old.stderr
    assert old.returncode == 1, text[-2000:]
    assert "mapping at op 3 of 4: finish r2" in text and "free([2, 3, 4]) (the whole row" in text
    fixed, = kvfuzz_commands(folder_of("0.5.20"), ("replay", F, "--impl", "sglang.swa"))
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]


def test_finding_t_diverges_on_0_5_10_and_not_on_0_5_11():
    # a process a command (`kvfuzz_with`): the session's imports look for the SWA class's
    # module under `mem_cache.allocator`, which before 0.5.13 is a module, not a package
    old = kvfuzz_with(folder_of("0.5.10"), "replay", T, "--impl", "sglang.swa")
    text = old.stdout + old.stderr
    assert old.returncode == 1 and "None vs success at op 7 of 8" in text, text[-2000:]
    fixed = kvfuzz_with(folder_of("0.5.11"), "replay", T, "--impl", "sglang.swa")
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


@pytest.mark.parametrize("page_size", [1, 2])
def test_windows_and_rows_released_agree_on_0_5_17(page_size, tmp_path):
    path = tmp_path / f"swa-rows-{page_size}.json"
    path.write_text(json.dumps(rows_released(page_size)))
    done, = kvfuzz_commands(folder_of("0.5.17"), ("replay", path, "--impl", "sglang.swa"))
    text = done.stdout + done.stderr
    assert done.returncode == 0 and "no divergence" in text, text[-3000:]
