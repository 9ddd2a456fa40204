"""The `kvfuzz` command as a user meets it, on every target: exit statuses, one-line errors, a
divergence shrunk, saved and replayed with the same report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvfuzz.fuzz.engine.tally import Tally
from kvfuzz.fuzz.targets import TARGETS
from tests.conftest import ROOT
from tests.helpers import by_tier, kvfuzz_here, summary_rows

# Per target: a mutant the seeded run finds within `cases` inputs, and the bundled run's size.
MUTANTS = {"extend": ("mutant.owner_left_bisect", 500, 200),
           "decode": ("mutant.inclusive_rank", 500, 200),
           "allocator": ("mutant.allocator.padding_page", 3, 3),
           "compaction": ("mutant.compaction.p2v_not_cleared", 5, 3),
           "mamba": ("mutant.mamba.group_end_leaks", 20, 20),
           "swa": ("mutant.swa.evict_keeps_mapping", 20, 20),
           "blockpool": ("mutant.vllm.blockpool.freed_uncached_reused_last", 5, 20),
           "kvmanager": ("mutant.vllm.kvmanager.free_head_first", 5, 20),
           "radix": ("mutant.sglang.radix.evict_leaks_slots", 5, 20),
           "offload": ("mutant.vllm.offload.lru_touch_in_order", 5, 20),
           "unified": ("mutant.sglang.unified.evict_leaks_slots", 5, 10)}


def skip_unless_installed(target: str) -> None:
    # blockpool, kvmanager without vllm: tests/engine/test_missing_package
    if not TARGETS[target].catalogue.defaults():
        pytest.skip(f"{target}: {TARGETS[target].catalogue.not_run_reason()}")


def kvfuzz(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", *args], capture_output=True,
                          text=True, cwd=cwd)


def run(*args) -> tuple[int, str, str]:
    ran = kvfuzz_here(*args)
    return ran.returncode, ran.stdout, ran.stderr


def test_every_target_has_a_mutant_here():
    assert sorted(MUTANTS) == sorted(TARGETS)


def test_list_names_every_target_and_implementation_without_importing_torch():
    code = ("import sys; from kvfuzz.fuzz.cli.main import main; main(['list']); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for name, target in TARGETS.items():
        assert f"{name}:" in result.stdout
        assert all(impl.name in result.stdout for impl in target.catalogue.implementations)


@pytest.mark.parametrize("target", by_tier(MUTANTS))
def test_diff_passes_on_bundled_implementations(target, tmp_path):
    skip_unless_installed(target)
    status, _, err = run("diff", target, "--cases", str(MUTANTS[target][2]),
                         "--corpus", str(tmp_path))
    assert status == 0, err
    assert f"summary: {target}" in err
    assert all(impl.name in err for impl in TARGETS[target].catalogue.defaults())
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module", params=by_tier(MUTANTS))
def found(request, tmp_path_factory):
    """A mutant's divergence, found once per target: (target, mutant, stderr, saved files)."""
    target = request.param
    skip_unless_installed(target)
    mutant, cases, _ = MUTANTS[target]
    corpus = tmp_path_factory.mktemp(f"found-{target}")
    status, _, err = run("diff", target, "--impl", mutant, "--cases", str(cases),
                         "--corpus", str(corpus))
    assert status == 1, err
    return target, mutant, err, sorted(corpus.iterdir())


def test_divergence_is_shrunk_saved_and_reported(found):
    target, mutant, err, saved = found
    assert len(saved) == 1 and saved[0].name.startswith(f"{target}-"), saved
    assert f"DIVERGENCE  {target}  implementation {mutant}" in err
    assert "shrunk from generator" in err and f"original  kvfuzz diff {target} --seed 0" in err
    assert f"replay    kvfuzz replay {saved[0]} --impl {mutant}" in err


def test_replay_reproduces_the_saved_divergence(found):
    target, mutant, err, saved = found
    status, out, _ = run("replay", str(saved[0]), "--impl", mutant)
    assert status == 1
    report = err[err.index("DIVERGENCE"):err.index("  replay    ")]
    assert report in out, (report, out)
    status, out, _ = run("replay", str(saved[0]))  # the bundled implementations agree on it
    ran = out.count("ok ") + out.count("outside contract ")  # offload: one policy each
    assert status == 0 and "ok " in out and ran == len(TARGETS[target].catalogue.defaults()), out


def test_diff_with_jobs_runs_every_case_of_every_implementation(tmp_path):
    status, _, err = run("diff", "decode", "--cases", "300", "--jobs", "2", "--corpus",
                         str(tmp_path))
    rows = summary_rows(err)
    defaults = TARGETS["decode"].catalogue.defaults()
    assert status == 0 and sorted(rows) == sorted(i.name for i in defaults), err
    for name, (cases, agree, outside, diverged, _) in rows.items():
        assert cases == "300" and int(agree) + int(outside) == 300 and diverged == "no", (name, err)
    assert not list(tmp_path.iterdir())


def test_outside_implementation_by_import_path_runs_every_case(tmp_path):
    path = "kvfuzz.impl.paged.vectorized:alloc_extend"
    status, _, err = run("diff", "extend", "--impl", path, "--cases", "100", "--corpus",
                         str(tmp_path))
    rows = summary_rows(err)
    name = TARGETS["extend"].catalogue.resolve(path).name  # a registered one keeps its name
    assert status == 0 and list(rows) == [name], err
    cases, agree, outside, diverged, _ = rows[name]
    assert cases == "100" and int(agree) + int(outside) == 100 and int(agree) > 0, err
    assert diverged == "no"


@pytest.mark.slow
def test_the_command_as_a_process_exits_with_its_status_and_one_line_errors(tmp_path):
    """What the in-process tests cannot see: the installed entry point's exit status, and that
    an error prints one line and no traceback from a fresh interpreter."""
    good = kvfuzz("diff", "decode", "--cases", "50", "--jobs", "2", "--corpus", str(tmp_path))
    assert good.returncode == 0 and "summary: decode" in good.stderr, good.stderr
    for args, expected in (BAD_INPUTS["wrong signature"], BAD_INPUTS["unknown target"]):
        bad = kvfuzz(*args, "--corpus", str(tmp_path), cwd=ROOT)
        assert bad.returncode == 2 and expected in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    path = tmp_path / "input.json"
    path.write_text("{oops")
    malformed = kvfuzz("replay", str(path))
    assert malformed.returncode == 2 and "not valid JSON" in malformed.stderr
    assert "Traceback" not in malformed.stderr and list(tmp_path.iterdir()) == [path]


def test_racing_chunks_keep_the_lowest_divergence():
    # Chunks finish in any order; the report must be the first failing index, whoever found it.
    total, later, earlier = Tally(), Tally(cases=3, divergence="late", at=30), \
        Tally(cases=2, divergence="early", at=12)
    total.merge(later)
    total.merge(earlier)
    total.merge(Tally(cases=1, divergence="latest", at=40))
    assert (total.divergence, total.at, total.cases) == ("early", 12, 6)


BAD_INPUTS = {
    "unknown implementation": (["diff", "extend", "--impl", "no.such"], "unknown implementation"),
    "unknown trace implementation": (["diff", "compaction", "--impl", "compaction.nope"],
                                     "known: compaction.lazy"),
    "unresolvable import path": (["diff", "allocator", "--impl", "nosuchpkg.mod:Thing"],
                                 "cannot import 'nosuchpkg.mod'"),
    "missing attribute": (["diff", "extend", "--impl", "kvfuzz.impl.paged.vectorized:nope"],
                          "has no attribute 'nope'"),
    "unknown target": (["diff", "nosuch"], "invalid choice"),
    "missing file": (["replay", "/nonexistent/case.json"], "no such file"),
    "bad case count": (["diff", "extend", "--cases", "0"], "positive integer"),
    "case count past any run": (["diff", "extend", "--cases", "99999999999999"],
                                "positive integer"),
    "too many workers": (["diff", "extend", "--jobs", "1000"], "worker processes"),
    "no such device": (["diff", "extend", "--device", "cuda:99"], "--device cuda:99"),
    "zero timeout": (["replay", "corpus", "--timeout", "0"], "expected seconds"),
    "memory not a size": (["diff", "extend", "--memory", "lots"], "expected a size such as 4G"),
    "memory too small": (["replay", "corpus", "--memory", "1M"], "expected a size from 64M up"),
    "class for a function target": (["diff", "extend", "--impl",
                                     "kvfuzz.impl.allocator.paged_allocator:PagedAllocator"],
                                    "is a class"),
    "function for a class target": (["diff", "allocator", "--impl",
                                      "kvfuzz.impl.paged.vectorized:alloc_extend"],
                                     "not a class"),
    "wrong signature": (["diff", "extend", "--impl", "kvfuzz.impl.paged.vectorized:alloc_decode"],
                        "cannot be called with 7 positional arguments"),
    "raw triton kernel": (["diff", "extend", "--impl",
                           "kvfuzz.impl.paged.triton_kernels:extend_kernel"],
                          "raw Triton kernel"),
    "unknown profile": (["diff", "kvmanager", "--profile", "nope"],
                        "--profile: kvmanager has no generator profile 'nope'; its profiles: "),
    "profile of a target without profiles": (["diff", "extend", "--profile", "corners"],
                                             "extend has no generator profile 'corners'"),
    "profile of every target": (["diff", "--profile", "corners"],
                                "names a profile of one target"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_usage_exits_2_with_one_line_and_writes_nothing(name, tmp_path):
    args, expected = BAD_INPUTS[name]
    status, out, err = run(*args, *(["--corpus", str(tmp_path)] if args[0] == "diff" else []))
    assert status == 2, err
    assert expected in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


MALFORMED = {
    "not json": ("{oops", "not valid JSON"),
    "wrong format": ({"format": "other"}, "field 'format'"),
    "case target": ({"format": "kvfuzz-case/1", "target": "x"}, "field 'target'"),
    "page size zero": ({"format": "kvfuzz-case/1", "target": "decode", "page_size": 0,
                        "seq_lens": [], "last_loc": [], "free_pages": []}, "field 'page_size'"),
    "non-integer slot": ({"format": "kvfuzz-case/1", "target": "decode", "page_size": 4,
                          "seq_lens": [2], "last_loc": ["x"], "free_pages": []},
                         "field 'last_loc[0]'"),
    "lists differ": ({"format": "kvfuzz-case/1", "target": "decode", "page_size": 4,
                      "seq_lens": [2, 3], "last_loc": [4], "free_pages": []}, "differ in length"),
    "unknown field": ({"format": "kvfuzz-case/1", "target": "decode", "page_size": 4,
                       "seq_lens": [], "last_loc": [], "free_pages": [], "extra": 1},
                      "field 'extra'"),
    "allocator page size": ({"format": "kvfuzz-allocator-trace/1", "page_size": "4", "size": 64,
                             "need_sort": False, "ops": []}, "field 'page_size'"),
    "allocator op as a list": ({"format": "kvfuzz-allocator-trace/1", "page_size": 4,
                                "size": 64, "need_sort": False, "debug": False,
                                "ops": [{"op": ["admit"]}]},
                               "field 'ops[0].op'"),
    "compaction params missing": ({"format": "kvfuzz-compaction-trace/1",
                                   "params": {"epp_up": 8}, "ops": []},
                                  "field 'params.total_bytes'"),
    # Limits: a few hundred bytes must not ask for gigabytes.
    "compaction buffer": ({"format": "kvfuzz-compaction-trace/1", "params": {
        "total_bytes": 2**40, "epp_up": 8, "epp_down": 8, "sink_bytes": 8, "two_ended": True,
        "move_cap": 2}, "ops": []}, "field 'params.total_bytes'"),
    "extend tokens": ({"format": "kvfuzz-case/1", "target": "extend", "page_size": 4,
                       "prefix_lens": [0], "seq_lens": [2**40], "last_loc": [-1],
                       "free_pages": [1]}, "field 'seq_lens': tokens to extend"),
    "allocator ops": ({"format": "kvfuzz-allocator-trace/1", "page_size": 4, "size": 64,
                       "need_sort": False, "debug": False, "ops": [{"op": "clear"}] * 5000},
                      "field 'ops': operations over the limit"),
    "allocator extend length": ({"format": "kvfuzz-allocator-trace/1", "page_size": 4,
                                 "size": 64, "need_sort": False, "debug": False,
                                 "ops": [{"op": "extend", "rids": [1], "lens": [2**31]}]},
                                "field 'ops[0].lens[0]'"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_file_names_file_field_and_value(name, tmp_path):
    content, expected = MALFORMED[name]
    path = tmp_path / "input.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    status, _, err = run("replay", str(path))
    assert status == 2, err
    assert str(path) in err and expected in err, err
    assert "Traceback" not in err
