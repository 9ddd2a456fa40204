"""`kvfuzz history` in process, with fake cells (no release installed, no `kvfuzz diff` run):
the release lists and their one-line errors, the classes planned, a cell's verdict read from
`kvfuzz diff`'s output (real report layouts), the table and the picture's matrix, the results
file resumed (done cells skipped, errors and cells cut by a stop run again). The real cell, an
older SGLang release installed and run, is `test_history_release.py` (slow)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvfuzz.fuzz.history import findings, picture, releases, results, run, table
from kvfuzz.fuzz.history.cells import (AGREE, CRASHED, DIVERGES, ERROR, UNSUPPORTED, Cell,
                                       environment, verdict)
from kvfuzz.fuzz.history.releases import Release, ReleaseError, parse_list
from tests.helpers import kvfuzz_here

REPORT = """\
found: allocator sglang.paged: crashed: SIGSEGV
DIVERGENCE  allocator  implementation sglang.paged
  trace     ecbf9aca2a443a60  shrunk from generator allocator/2[P>=2], seed 0, index 0, 200 ops
  what      crashed: SIGSEGV
  op        29 of 30: extend r6+4
  at        sglang/kernels/ops/memory/allocator.py:77 in alloc_extend_kernel
  stack     triton/runtime/interpreter.py:455 in create_masked_load
  stack     sglang/kernels/ops/memory/allocator.py:77 in alloc_extend_kernel
  replay    kvfuzz replay /c/allocator-ecbf9aca2a443a60.json --impl sglang.paged
  original  kvfuzz diff allocator --seed 0 --start 0 --cases 1 --impl sglang.paged
DIVERGENCE  allocator  implementation sglang.paged
  trace     d66b3c4588373155  shrunk from generator allocator/2[P>=2], seed 0, index 1, 200 ops
  what      available_size at op 4 of 5: group end
  call      free_group_end()
  crash     AssertionError
  replay    kvfuzz replay /c/allocator-d66b3c4588373155.json --impl sglang.paged
summary: allocator  (--keep-going: every distinct divergence)
  implementation                      traces   agree  outside  diverged  findings  traces/s
  sglang.paged                            12       1        2         9         2       0.3
  wall time 111.2 s
"""
CRASH_ONLY = REPORT.split("DIVERGENCE", 2)
CRASH_ONLY = "DIVERGENCE".join(CRASH_ONLY[:2]) + "summary:" + REPORT.split("summary:")[1]


def test_release_lists_ranges_and_the_default():
    assert [r.version for r in parse_list("sglang", "0.5.20,0.5.17,0.5.20")] == [
        "0.5.17", "0.5.20"]  # sorted as versions, once each
    assert [r.version for r in parse_list("vllm", "0.27.0-0.29.0")] == [
        "0.27.0", "0.28.0", "0.29.0"]
    assert [r.version for r in parse_list("sglang", "0.5.9-0.5.11")] == ["0.5.10", "0.5.11"]
    default = parse_list("vllm", "default")
    assert default[0].version == "0.20.0" and default[-1].version == "0.33.0"
    assert len(default) == 14 and len(parse_list("sglang", "default")) == 14
    assert Release("sglang", "0.5.9").key < Release("sglang", "0.5.10").key


@pytest.mark.parametrize("text, says", [
    ("0.5.x", "'0.5.x' is not a release"),
    ("0.5.17,", "'' is not a release"),
    ("0.6.0-0.7.0", "no release of the default list lies in 0.6.0-0.7.0"),
])
def test_a_bad_release_list_is_one_line(text, says):
    with pytest.raises(ReleaseError, match=says):
        parse_list("sglang", text)


@pytest.mark.parametrize("argv, says", [
    (["--sglang", "latest"], "--sglang latest: 'latest' is not a release"),
    (["--vllm", "0.28.0", "--impl", "sglang.paged"], "--impl sglang.paged: no class of vllm"),
    (["--vllm", "0.28.0", "--cases", "0"], "--cases: expected a positive integer"),
    (["--vllm", "0.28.0", "--jobs", "99"], "--jobs: expected a number of worker processes"),
    (["--vllm", "0.28.0", "--find-links", "/no/such/dir"], "--find-links /no/such/dir: not a"),
    (["--vllm", "0.28.0", "--findings", "/no/such/dir"], "--findings /no/such/dir: not a"),
])
def test_the_command_refuses_bad_input_in_one_line(argv, says, tmp_path):
    ran = kvfuzz_here("history", *argv, "--results", tmp_path / "r.jsonl")
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.count("\n") == 1 and says in ran.stderr and "Traceback" not in ran.stderr
    assert not (tmp_path / "r.jsonl").exists()  # nothing ran, nothing written


def test_the_help_says_what_a_cell_is_and_how_to_resume():
    ran = kvfuzz_here("history", "--help")
    assert ran.returncode == 0
    for words in ("pip download --no-deps", "--no-deps --target", "--keep-going",
                  "not supported", "resume", "--sglang 0.5.10-0.5.23", "--vllm 0.20.0-0.33.0"):
        assert words in ran.stdout, words


def test_the_classes_of_a_release_are_its_upstream_entries():
    sglang = run.classes("sglang")
    assert ("allocator", "sglang.paged") in sglang and ("extend", "sglang.naive") in sglang
    assert ("decode", "sglang.naive") in sglang and ("unified", "sglang.unified.rust") in sglang
    assert not any(impl == "sglang.triton" for _, impl in sglang)  # a kernel: only when named
    assert run.classes("sglang", ("extend/sglang.triton",)) == [("extend", "sglang.triton")]
    assert {impl for _, impl in run.classes("vllm")} == {
        "vllm.blockpool", "vllm.kvmanager", "vllm.offload.lru", "vllm.offload.arc"}
    cells = run.plan(run.Options((Release("sglang", "0.5.17"), Release("vllm", "0.28.0")),
                                 ("sglang.naive", "vllm.blockpool")))
    assert [(c.release.version, c.name, c.cases) for c in cells] == [
        ("0.5.17", "extend/sglang.naive", 100), ("0.5.17", "decode/sglang.naive", 100),
        ("0.28.0", "blockpool/vllm.blockpool", run.TRACE_CASES)]


def test_a_cell_runs_kvfuzz_diff_with_its_release_first_on_the_path(tmp_path):
    cell = Cell(Release("sglang", "0.5.17"), "allocator", "sglang.paged", 12, 3, 60.0)
    command = cell.command(tmp_path)
    assert command[1:5] == ["-m", "kvfuzz.fuzz.cli", "diff", "allocator"]
    for pair in (["--impl", "sglang.paged"], ["--cases", "12"], ["--seed", "3"],
                 ["--corpus", str(tmp_path)]):
        assert any(command[i:i + 2] == pair for i in range(len(command)))
    assert "--keep-going" in command
    env = environment(tmp_path / "rel", {"PYTHONPATH": "/mine"})
    assert env["PYTHONPATH"].split(":") == [str(tmp_path / "rel"), "/mine"]
    assert environment(tmp_path, {})["PYTHONPATH"] == str(tmp_path)
    # each release builds its own C++ extensions (one shared build is rebuilt at every switch)
    assert env["TORCH_EXTENSIONS_DIR"] == str(tmp_path / "rel" / ".torch_extensions")


def test_a_divergence_is_the_first_report_that_is_not_a_crash():
    record = verdict(1, REPORT, "sglang.paged")
    assert record["status"] == DIVERGES
    assert record["counts"] == {"inputs": 12, "agree": 1, "outside": 2, "diverged": 9}
    first, second = record["findings"]
    assert first["what"] == "available_size at op 4 of 5: group end"
    assert first["file"] == "/c/allocator-d66b3c4588373155.json"
    assert first["crash"] == "AssertionError" and "stack" not in first
    assert second["what"] == "crashed: SIGSEGV" and second["op"] == "29 of 30: extend r6+4"
    assert second["stack"][0] == "triton/runtime/interpreter.py:455 in create_masked_load"


def test_a_crash_alone_is_crashed_with_its_stack():
    record = verdict(1, CRASH_ONLY, "sglang.paged")
    assert record["status"] == CRASHED and len(record["findings"]) == 1
    assert record["findings"][0]["at"].endswith("in alloc_extend_kernel")
    assert len(record["findings"][0]["stack"]) == 2
    cell = Cell(Release("sglang", "0.5.21"), "allocator", "sglang.paged", 10, 0, 60.0)
    assert run.progress(cell, {**record, "seconds": 287}) == (
        "sglang 0.5.21 allocator/sglang.paged: crashed: SIGSEGV  287 s")  # said once


def test_agree_unsupported_and_errors():
    agree = verdict(0, REPORT.split("DIVERGENCE")[0] + "summary:" + REPORT.split("summary:")[1],
                    "sglang.paged")
    assert agree["status"] == AGREE and agree["findings"] == []
    line = ("kvfuzz: error: import path 'sglang.srt.mem_cache.allocator.paged:alloc_decode_"
            "naive': raised NotThere: not supported: sglang 0.5.10 has no alloc_decode_naive in "
            "sglang.srt.mem_cache.allocator, before any input (its module, or its attribute)\n")
    unsupported = verdict(2, "INFO noise\n" + line, "sglang.naive")
    assert unsupported["status"] == UNSUPPORTED
    assert unsupported["reason"] == ("sglang 0.5.10 has no alloc_decode_naive in "
                                     "sglang.srt.mem_cache.allocator")
    other = verdict(2, "kvfuzz: error: --device cuda: this machine has 0 CUDA device(s)\n", "x")
    assert other["status"] == ERROR and "this machine has 0 CUDA" in other["reason"]
    assert verdict(1, "no report at all\n", "x")["status"] == ERROR  # a 1 with nothing read
    assert verdict(-11, "Segmentation fault\n", "x")["reason"] == "exit -11: Segmentation fault"
    assert verdict(130, "", "x")["reason"] == "interrupted"


def _cells():
    old, new = Release("sglang", "0.5.17"), Release("sglang", "0.5.20")
    return [Cell(r, t, i, 5, 0, 60.0) for r in (old, new)
            for t, i in (("allocator", "sglang.paged"), ("mamba", "sglang.mamba"))]


def _records(cells):
    crashed = verdict(1, CRASH_ONLY, "sglang.paged")
    records = {cells[0].key: {**crashed, "folder": "/h/sglang-0.5.17"},
               cells[1].key: {"status": UNSUPPORTED, "reason": "sglang 0.5.17 has no module m"},
               cells[2].key: {"status": AGREE, "counts": {"inputs": 5, "agree": 5,
                                                          "outside": 0, "diverged": 0}}}
    return records  # cells[3]: not run


def test_the_table_is_a_word_per_cell_and_the_findings_below():
    cells = _cells()
    text = table.render(cells, _records(cells))
    lines = text.splitlines()
    assert lines[0].split() == ["sglang", "0.5.17", "0.5.20"]
    assert lines[1].split() == ["allocator/sglang.paged", "CRASHED", "agree"]
    assert lines[2].split() == ["mamba/sglang.mamba", "n/s", "-"]
    assert "sglang 0.5.17 mamba/sglang.mamba: not supported: sglang 0.5.17 has no module m" \
        in text
    assert ("replay  PYTHONPATH=/h/sglang-0.5.17 kvfuzz replay "
            "/c/allocator-ecbf9aca2a443a60.json --impl sglang.paged") in text
    assert "stack   triton/runtime/interpreter.py:455 in create_masked_load" in text
    assert "0.5.20 allocator" not in text  # an agreeing cell has no details
    document = table.as_json(cells, _records(cells))
    assert [c["result"] and c["result"]["status"] for c in document["cells"]] == [
        CRASHED, UNSUPPORTED, AGREE, None]
    json.dumps(document)


def test_the_picture_colours_each_cell_by_its_verdict(tmp_path, monkeypatch):
    cells = _cells()
    (versions, names, rows), = picture.matrices(cells, _records(cells)).values()
    value = picture.VALUE
    assert versions == ["0.5.17", "0.5.20"] and names[0] == "allocator/sglang.paged"
    assert rows == [[value[CRASHED], value[AGREE]], [value[UNSUPPORTED], value[None]]]
    pytest.importorskip("matplotlib")
    drawn = picture.draw(cells, _records(cells), tmp_path / "h.png")
    assert drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # not installed
    assert picture.draw(cells, _records(cells), tmp_path / "none.png") is None


@pytest.fixture
def fake_cells(tmp_path, monkeypatch):
    """History runs whose cells are fakes: `verdicts[impl]` is each cell's status; every run
    cell is listed in `ran`."""
    ran, verdicts = [], {}
    monkeypatch.setattr(run.upstream_cache, "fetch", lambda progress: tmp_path)
    monkeypatch.setattr(releases, "install",
                        lambda release, links, say: tmp_path / release.version)

    def fake(cell, folder, corpus, log, started=None):
        ran.append((cell.release.version, cell.impl))
        status = verdicts.get(cell.impl, AGREE)
        reason = {"interrupted": "interrupted", ERROR: "exit 1: boom"}.get(status)
        return {"key": cell.key, "status": ERROR if reason else status,
                **({"reason": reason} if reason else {}), "findings": []}

    monkeypatch.setattr(run, "run_cell", fake)
    options = run.Options((Release("sglang", "0.5.17"), Release("sglang", "0.5.20")),
                          ("sglang.mamba", "sglang.token"), cases=3,
                          results=tmp_path / "r" / "results.jsonl", picture=tmp_path / "p.png",
                          findings=None)  # the repository's saved findings: never replayed here
    return options, ran, verdicts


def test_a_rerun_skips_the_cells_done_and_runs_errors_again(fake_cells, capsys):
    options, ran, verdicts = fake_cells
    verdicts.update({"sglang.token": ERROR})
    assert run.history(options) == 1  # a cell could not run
    assert sorted(ran) == [("0.5.17", "sglang.mamba"), ("0.5.17", "sglang.token"),
                           ("0.5.20", "sglang.mamba"), ("0.5.20", "sglang.token")]
    err = capsys.readouterr().err
    assert "[1/4] sglang 0.5.17 " in err and "[4/4]" in err  # a progress line per cell
    saved = results.load(options.results)
    assert len(saved) == 2 and all(r["status"] == AGREE for r in saved.values())
    ran.clear()
    verdicts.clear()
    assert run.history(options) == 0
    assert sorted(ran) == [("0.5.17", "sglang.token"), ("0.5.20", "sglang.token")]
    assert "4 cells (2 done before" in capsys.readouterr().err
    ran.clear()
    assert run.history(options) == 0 and ran == []  # everything done
    ran.clear()
    assert run.history(replace(options, cases=4)) == 0
    assert len(ran) == 4  # other cases: other cells
    ran.clear()
    assert run.history(replace(options, rerun=True)) == 0
    assert len(ran) == 4  # --rerun: every cell asked runs again


def test_a_cell_cut_by_a_stop_is_not_kept(fake_cells, capsys):
    options, ran, verdicts = fake_cells
    verdicts.update({"sglang.token": "interrupted"})
    run.history(options)
    assert {key.split()[2] for key in results.load(options.results)} == {"sglang.mamba"}
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()
            if line.startswith(("allocator/", "mamba/"))}
    assert rows == {"mamba/sglang.mamba": ["agree", "agree"],
                    "allocator/sglang.token": ["-", "-"]}  # not run, not "error"


def test_the_results_file_survives_a_cut_last_line_and_refuses_garbage(tmp_path):
    path = tmp_path / "results.jsonl"
    good = json.dumps({"key": "a", "status": AGREE})
    path.write_text(good + "\n" + '{"key": "b", "sta')  # killed while writing
    assert list(results.load(path)) == ["a"]
    path.write_text("not json\n" + good + "\n")
    with pytest.raises(results.ResultsError, match=r"results.jsonl: line 1 is not a history"):
        results.load(path)
    ran = kvfuzz_here("history", "--vllm", "0.28.0", "--results", path)
    assert ran.returncode == 2 and "line 1 is not a history record" in ran.stderr


REPLAYED = """\
ok                /f/sglang-0.5.10/allocator-bbbb.json  sglang.token
DIVERGENCE  allocator  implementation sglang.token
  trace     aaaa  finding B (docs/release-history.md)
  what      free list at op 3 of 4: group end
  replay    kvfuzz replay /f/sglang-0.5.10/allocator-aaaa.json --impl sglang.token
outside contract  /f/sglang-0.5.10/allocator-cccc.json  sglang.token: raised ValueError (reset)
replayed 3 file(s): divergence found
"""


def test_a_saved_finding_is_read_by_its_file_from_the_replay():
    paths = [findings.Path(f"/f/sglang-0.5.10/allocator-{n}.json")
             for n in ("aaaa", "bbbb", "cccc", "dddd")]
    read = findings.outcomes(1, REPLAYED, paths, "sglang.token")
    assert read["status"] is None
    assert [(o["file"][10:14], o["result"]) for o in read["outcomes"]] == [
        ("aaaa", findings.STILL), ("bbbb", findings.FIXED),  # a release without the bug
        ("cccc", findings.OUTSIDE), ("dddd", findings.NOT_REPLAYED)]
    assert read["outcomes"][0]["what"] == "free list at op 3 of 4: group end"
    assert read["outcomes"][2]["what"] == "raised ValueError (reset)"
    assert findings.summary(read) == ("4 saved findings: 1 still diverges, 1 no longer "
                                      "diverges, 1 outside, 1 not replayed")
    other = findings.outcomes(0, REPLAYED.replace("sglang.token", "sglang.paged"), paths,
                              "sglang.token")  # another class's lines are not this one's
    assert {o["result"] for o in other["outcomes"]} == {findings.NOT_REPLAYED}
    line = "kvfuzz: error: ... not supported: sglang 0.5.10 has no module m, before any input\n"
    assert findings.outcomes(2, line, paths, "x")["status"] == (
        "not supported: sglang 0.5.10 has no module m")
    assert findings.outcomes(130, "", paths, "x")["status"] == "interrupted"
    command = findings.command(Cell(Release("sglang", "0.5.10"), "allocator", "sglang.token",
                                    2, 0, 60.0), paths[:1])
    assert command[3:6] == ["replay", str(paths[0]), "--impl"] and "sglang.token" in command


def test_the_saved_findings_of_a_release_replay_after_its_cells(fake_cells, tmp_path, capsys,
                                                                 monkeypatch):
    options, ran, verdicts = fake_cells
    saved = tmp_path / "saved"
    (saved / "sglang-0.5.17").mkdir(parents=True)
    (saved / "sglang-0.5.17" / "allocator-aaaa.json").write_text("{}")
    (saved / "sglang-0.5.17" / "mamba-bbbb.json").write_text("{}")
    replays = []

    def fake_replay(cell, folder, paths, log, started=None):
        replays.append((cell.release.version, cell.impl, [p.name for p in paths]))
        result = findings.STILL if cell.impl == "sglang.token" else findings.FIXED
        return {"files": findings.names(paths), "status": None, "outcomes": [
            {"file": p.name, "result": result, "what": "w"} for p in paths]}

    monkeypatch.setattr(run.findings, "replay", fake_replay)
    options = replace(options, findings=saved)
    verdicts.update({"sglang.mamba": UNSUPPORTED})  # no replay where the class cannot run
    assert run.history(options) == 0
    assert replays == [("0.5.17", "sglang.token", ["allocator-aaaa.json"])]  # its target's files
    out = capsys.readouterr().out
    assert "allocator/sglang.token  agree*" in " ".join(out.split("   "))
    assert ("sglang 0.5.17 allocator/sglang.token: 1 saved finding: 1 still diverges\n"
            "  sglang-0.5.17/allocator-aaaa.json: still diverges (w)") in out
    replays.clear(), ran.clear()
    assert run.history(options) == 0 and replays == [] and ran == []  # resumed: all done
    (saved / "sglang-0.5.17" / "allocator-cccc.json").write_text("{}")
    assert run.history(options) == 0
    assert ran == [] and replays == [  # a new file: the replay alone runs again
        ("0.5.17", "sglang.token", ["allocator-aaaa.json", "allocator-cccc.json"])]
    replays.clear()
    (saved / "sglang-0.5.17" / "allocator-dddd.json").write_text("{}")
    assert run.history(replace(options, findings=None)) == 0 and replays == []  # --no-findings
