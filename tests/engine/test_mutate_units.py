"""`kvfuzz mutate`'s parts, in this process: the operators, mutant ids and their application,
putting a mutant in place, equivalence by compiled code, the line trace, whether a placed
mutant's lines ran (and which survivors are rerun fresh for it), the results file and the score
(fuzz/engine/mutation/)."""

from __future__ import annotations

import importlib
import json
import textwrap

import pytest

from kvfuzz.fuzz.engine.mutation import marking, placing
from kvfuzz.fuzz.engine.mutation.mutants import apply, enumerate_mutants
from kvfuzz.fuzz.engine.mutation.reach import LinesRun, LineTrace, reached
from kvfuzz.fuzz.engine.mutation.report import score, summary
from kvfuzz.fuzz.engine.mutation.results import ResultsFile
from collections import Counter

SOURCE = textwrap.dedent('''\
    LIMIT = 1 + 2

    def top(values, n=3):
        total = sum(values[1:n])
        return total


    class Box:
        SIZE = 4

        @staticmethod
        def scaled(x):
            return x * 2

        def call(
                self, a):
            self.value = max(a,
                             0)
            return [v + 1 for v in range(a)]
    ''')


def mutants(**kw):
    return enumerate_mutants("m", "m.py", SOURCE, **kw)


def test_only_function_bodies_are_mutated():
    found = mutants()
    assert found and all(m.function in ("top", "Box.scaled", "Box.call") for m in found)
    lines = {m.line for m in found}
    assert 1 not in lines and 3 not in lines and 9 not in lines  # module, signature, class body


def test_ids_are_stable_and_unique():
    first, second = mutants(), mutants()
    assert [m.id for m in first] == [m.id for m in second]
    assert len({m.id for m in first}) == len(first)


def test_scopes_and_operator_globs_select():
    assert {m.function for m in mutants(scopes=("Box",))} == {"Box.scaled", "Box.call"}
    assert {m.operator for m in mutants(select=("ShiftSlice*",))} == {"ShiftSliceBound"}


@pytest.mark.parametrize("operator, line, expected", [
    ("ShiftSliceBound", 4, "total = sum(values[(1) + 1:n])"),
    ("ReplaceBinaryOperator_Mul_Add", 13, "return x + 2"),
    ("NumberReplacer", 13, "return x * 3"),
    ("RemoveStatement", 5, "pass"),
])
def test_apply_makes_the_one_edit(operator, line, expected):
    mutant = next(m for m in mutants(select=(operator,)) if m.line == line)
    mutated, before, after = apply(SOURCE, mutant)
    assert after == expected and before != after
    assert mutated.count("\n") == SOURCE.count("\n")  # later line numbers hold
    compile(mutated, "m.py", "exec")


def test_removing_a_statement_over_lines_keeps_the_line_count():
    mutant = next(m for m in mutants(select=("RemoveStatement",)) if m.line == 17)
    mutated, _, after = apply(SOURCE, mutant)
    assert after == "(None" and mutated.count("\n") == SOURCE.count("\n")
    code = placing.functions(compile(mutated, "m.py", "exec"))
    assert code[("Box.call", 0)].co_firstlineno == 15


def test_a_changed_source_is_refused():
    mutant = next(m for m in mutants(select=("NumberReplacer",)) if m.line == 13)
    with pytest.raises(ValueError, match="source changed"):
        apply(SOURCE.replace("x * 2", "x"), mutant)


def fixture_module():
    return importlib.import_module("tests.engine.mutate_fixture")


def place_one(operator: str, function: str):
    module = fixture_module()
    source = open(module.__file__).read()
    original = placing.functions(compile(source, module.__file__, "exec"))
    mutant = next(m for m in enumerate_mutants(module.__name__, module.__file__, source,
                                               select=(operator,)) if m.function == function)
    mutated, _, _ = apply(source, mutant)
    return module, placing.place(module, original, mutated)


def restore(module, saved):
    for function, code in saved.items():
        function.__code__ = code


@pytest.fixture
def pristine():
    """Every fixture function's code as imported, put back after the test."""
    module = fixture_module()
    saved = {f: f.__code__ for f in placing.live_functions(module).values()}
    yield module
    restore(module, saved)


def test_a_placed_mutant_changes_the_live_function(pristine):
    assert pristine.small(1) == 1
    _, changed = place_one("ReplaceFalseWithTrue", "small")
    assert changed == ["small"] and pristine.small(1) == 2


def test_methods_behind_decorators_are_placed(pristine):
    assert pristine.Slots.twice(3) == 6
    _, changed = place_one("ReplaceBinaryOperator_Mul_Add", "Slots.twice")
    assert changed == ["Slots.twice"] and pristine.Slots.twice(3) == 5
    live = placing.live_functions(pristine)
    assert ("Slots.capacity", 0) in live and ("Slots.alloc", 0) in live


def test_equivalent_mutants_change_no_code(pristine):
    source = "def f(x):\n    None\n    return x\n"
    original = placing.functions(compile(source, pristine.__file__, "exec"))
    mutant = next(m for m in enumerate_mutants("m", "m.py", source, select=("RemoveStatement",))
                  if m.line == 2)
    assert placing.place(pristine, original, apply(source, mutant)[0]) == []


def test_a_function_without_a_live_object_is_not_placed(pristine):
    source = open(pristine.__file__).read() + "\n\ndef gone():\n    return 1\n"
    original = placing.functions(compile(source, pristine.__file__, "exec"))
    mutant = next(m for m in enumerate_mutants("m", "m.py", source, select=("NumberReplacer",))
                  if m.function == "gone")
    with pytest.raises(placing.NotPlaced, match="gone"):
        placing.place(pristine, original, apply(source, mutant)[0])


def test_the_line_trace_sees_the_lines_run(pristine):
    with LineTrace([pristine.__file__]) as trace:
        pristine.small(4)
    lines = trace.lines[pristine.__file__]
    start = pristine.small.__code__.co_firstlineno
    assert reached(lines, start + 1, start + 1) and reached(lines, start + 3, start + 3)
    assert not reached(lines, start + 2, start + 2)  # the dead branch


def test_results_resume_and_start_over(tmp_path):
    path = tmp_path / "r.jsonl"
    results = ResultsFile(path, {"cases": 5})
    assert results.load() == ({}, "")
    results.add({"id": "a", "status": "killed"})
    results.close()
    records, note = ResultsFile(path, {"cases": 5}).load()
    assert records == {"a": {"id": "a", "status": "killed"}} and "resuming, 1" in note
    records, note = ResultsFile(path, {"cases": 6}).load()
    assert records == {} and "starting over" in note
    assert json.loads(path.read_text().splitlines()[0])["cases"] == 6


def test_a_new_generator_version_starts_the_results_over(tmp_path):
    """Verdicts hold for the cases that made them: the results file's identity names the
    generator (a file of blockpool/2's traces once resumed into a blockpool/3 run)."""
    from types import SimpleNamespace

    from kvfuzz.fuzz.engine.mutation.worker import _stream

    def target(name, picked=None):
        plain = SimpleNamespace(name=name)
        if picked is None:
            return SimpleNamespace(generator=plain)
        return SimpleNamespace(generator=SimpleNamespace(
            generator_for=lambda impls: SimpleNamespace(name=picked)))

    assert _stream(target("toy/1"), None) == "toy/1"
    assert _stream(target("toy/1", picked="toy/2[no-replace]"), None) == "toy/2[no-replace]"
    # a mix of streams under one name: its layout is part of the identity, so moving a share to a
    # new stream (kvmanager's mix, 2026-12-04) starts the file over
    from kvfuzz.strategies.kvmanager.streams import GENERATOR, MixedStreams
    mixed = _stream(SimpleNamespace(generator=GENERATOR), None)
    fewer = MixedStreams(GENERATOR.base, GENERATOR.streams[:-1])
    assert mixed.startswith("kvmanager/5 [") and mixed != _stream(
        SimpleNamespace(generator=fewer), None)
    path = tmp_path / "r.jsonl"
    results = ResultsFile(path, {"cases": 5, "stream": "toy/1"})
    results.load()
    results.add({"id": "a", "status": "survived"})
    results.close()
    records, note = ResultsFile(path, {"cases": 5, "stream": "toy/2"}).load()
    assert records == {} and "starting over" in note


def test_the_tests_judge_declared_equivalents_apart():
    """A declared equivalent is run by --also-run (a kill there puts the declaration in doubt)
    and counted apart from the matrix; one that compiles to the original's code is not run."""
    from kvfuzz.fuzz.engine.mutation.also_run import asked, matrix

    same = {"status": "equivalent", "what": "compiles to the original's code"}
    said = {"status": "equivalent", "what": "declared: a clamp that never binds"}
    assert not asked(same) and asked(said) and not asked({"status": "cosmetic"})
    records = [{**said, "tests": "killed"}, {**said, "tests": "survived"},
               {"status": "survived", "tests": "killed"}, {"status": "killed", "tests": "killed"}]
    assert matrix(records) == {"both": 1, "kvfuzz only": 0, "tests only": 1, "neither": 0,
                               "declared equivalent, tests kill": 1}


def test_the_report_lists_tests_only_kills_apart_from_declared_equivalents():
    from kvfuzz.fuzz.engine.mutation.report import _tests_lines

    def record(id_, status, tests, what=""):
        return {"id": id_, "function": "f", "status": status, "tests": tests, "what": what,
                "tests_command": "pytest"}

    records = [record("m:1:0:A:0", "survived", "killed"),
               record("m:2:0:B:0", "equivalent", "killed", "declared: never negative"),
               record("m:3:0:C:0", "killed", "killed")]
    text = "\n".join(_tests_lines({"records": records, "matrix": {}}))
    gaps, _, wrong = text.partition("declared equivalent, killed by the tests (1):")
    assert "killed by the tests, not by kvfuzz (1):\n  m:1:0:A:0 f" in gaps
    assert "m:2:0:B:0" in wrong and "m:2:0:B:0" not in gaps and "m:3:0:C:0" not in text


def test_the_score_counts_reached_competent_mutants_only():
    counts = Counter({"killed": 6, "timeout": 1, "crashed": 1, "survived": 2, "not reached": 9,
                      "equivalent": 4, "incompetent": 3})
    assert score(counts) == 0.8
    assert score(Counter({"not reached": 3})) is None
    records = [{"status": "killed", "function": "f", "module": "m"},
               {"status": "survived", "function": "g", "module": "m"}]
    report = summary(records, {})
    assert report["score"] == 0.5 and report["functions"]["g"]["score"] == 0.0


def test_removing_a_super_call_keeps_the_method_placeable(pristine):
    module = pristine
    source = open(module.__file__).read()
    original = placing.functions(compile(source, module.__file__, "exec"))
    mutant = next(m for m in enumerate_mutants(module.__name__, module.__file__, source,
                                               ("Slots.free",), ("RemoveStatement",))
                  if "super" in apply(source, m)[1])
    mutated, _, after = apply(source, mutant)
    assert after == "(__class__)" and placing.place(module, original, mutated) == ["Slots.free"]
    slots = module.Slots(4, "cpu")
    taken = slots.alloc(2)
    slots.free(taken)
    assert slots.available_size() == 2  # the mutant's free gives nothing back


def test_mutants_in_messages_are_cosmetic():
    source = ("def f(x):\n    logger.debug('n=%d', x + 1)\n    print(x - 1)\n"
              "    return x * 2\n")
    found = enumerate_mutants("m", "m.py", source, select=("ReplaceBinaryOperator_*",))
    assert {m.line for m in found if m.cosmetic} == {2, 3}
    assert {m.line for m in found if not m.cosmetic} == {4}


def test_a_declared_equivalent_relabels_a_survivor_never_a_kill():
    from kvfuzz.fuzz.engine.mutation.run import declared_equivalents, relabel

    declared = declared_equivalents()
    assert declared and all(reason for reason in declared.values())
    assert relabel({"status": "survived"}, "same state")["status"] == "equivalent"
    assert relabel({"status": "killed"}, "same state")["status"] == "killed"
    assert relabel({"status": "survived"}, None)["status"] == "survived"


def test_a_resumed_survivor_declared_since_its_run_is_reported_equivalent():
    # The order a user works in: run, read a survivor, declare it, run the same command again.
    # The rerun resumes every verdict from the results file; the report must still apply today's
    # list (it used to relabel only mutants run in that process).
    from types import SimpleNamespace

    from kvfuzz.fuzz.engine.mutation.run import report_records

    chosen = [SimpleNamespace(id=name, module="m", line=1, function="f", operator="Op")
              for name in ("m:1:0:Op:0", "m:2:0:Op:0", "m:3:0:Op:0")]
    done = {"m:1:0:Op:0": {"id": "m:1:0:Op:0", "status": "survived"},
            "m:2:0:Op:0": {"id": "m:2:0:Op:0", "status": "killed"}}
    declared = {"m:1:0:Op:0": "same state", "m:2:0:Op:0": "wrongly declared"}
    records = report_records(chosen, done, declared)
    assert [r["status"] for r in records] == ["equivalent", "killed", "not run"]
    assert records[0]["what"] == "declared: same state"
    assert done["m:1:0:Op:0"]["status"] == "survived"  # the results file's record is untouched


def test_a_malformed_equivalents_file_is_one_line(tmp_path):
    from kvfuzz.fuzz.engine.mutation.run import declared_equivalents
    from kvfuzz.fuzz.engine.mutation.supervisor import MutationError

    bad = tmp_path / "eq.json"
    bad.write_text('{"mutants": [1]}')
    with pytest.raises(MutationError, match="eq.json: expected a JSON object"):
        declared_equivalents(str(bad))


def place_register_mutant(module, marked=False):
    """`register_policies` with its early return brought to life (and the marker before its
    statement, `marked`); its placed code and mutant."""
    source = open(module.__file__).read()
    original = placing.functions(compile(source, module.__file__, "exec"))
    mutant = next(m for m in enumerate_mutants(module.__name__, module.__file__, source,
                                               ("register_policies",), ("ReplaceFalseWithTrue",)))
    mutated = apply(source, mutant)[0]
    flagged = marking.marked(mutated, module.__file__, mutant.line, mutant.column) \
        if marked else None
    return placing.place_code(module, original, mutated, flagged), mutant


@pytest.fixture
def armed(pristine):
    """The fixture module with its registry and the marker's builtin put back after the test."""
    import builtins

    saved = dict(pristine._POLICIES)
    yield pristine
    pristine._POLICIES.clear()
    pristine._POLICIES.update(saved)
    vars(builtins).pop(marking.MARK, None)


def test_a_set_up_done_before_placing_never_runs_the_mutant(armed):
    # The hole a forked child has: the registry was filled before the mutant was placed, so the
    # mutated set-up is never called and every allocation goes through (the mutant "survives");
    # in a process where it is still to fill, the mutant runs and refuses the allocation. The
    # marker (what a child reads) and the trace (its fallback) both tell the two apart.
    armed._ensure_registered()  # the worker's unmutated run, before the fork
    placed, mutant = place_register_mutant(armed, marked=True)
    slots = armed.Slots(4, "cpu")
    flag = marking.arm()
    with LinesRun(placed.values(), mutant.line, mutant.end_line) as forked:
        assert slots.alloc(2) is not None
    assert flag == [False] and not forked.ran
    armed._POLICIES.clear()  # a fresh process: nothing registered yet
    with LinesRun(placed.values(), mutant.line, mutant.end_line) as fresh:
        assert slots.alloc(2) is None
    assert flag == [True] and fresh.ran


FLOW = textwrap.dedent('''\
    def f(x):
        if x > 0:
            return 1
        elif x < -5:
            return 2
        while x < 0:
            x += 1
        return x
    ''')


@pytest.mark.parametrize("line, column, runs, idle", [
    (2, 7, 1, None),     # the `if` test: any call
    (3, 8, 1, -1),       # its `return`: positive x only
    (4, 9, -6, 1),       # the `elif` test: not when the `if` returned
    (6, 10, -1, 1),      # the `while` test: not reached from a positive x
    (7, 8, -1, 0),       # the loop's body: only while x < 0
])
def test_the_marker_flags_the_statement_holding_the_edit(armed, line, column, runs, idle):
    code = marking.marked(FLOW, "flow.py", line, column)
    namespace: dict = {}
    exec(code, namespace)
    flag = marking.arm()
    if idle is not None:
        assert namespace["f"](idle) == {1: 1, -1: 0, 0: 0}[idle] and flag == [False]
    namespace["f"](runs)
    assert flag == [True]
    # the marker takes the held statement's line: no line of the file moves
    plain = compile(FLOW, "flow.py", "exec")
    lines = [sorted({n for _, _, n in placing.functions(c)[("f", 0)].co_lines() if n})
             for c in (plain, code)]
    assert lines[0] == lines[1]


def test_the_marker_finds_an_edit_after_wide_characters(armed):
    # parso's columns count characters, ast's offsets bytes: "é" is two of them, and an edit
    # at the start of the statement after it (a RemoveStatement) is one byte short of it
    source = 'def g(s):\n    t = "é"; return s + 1\n'
    column = source.splitlines()[1].index("return")
    namespace: dict = {}
    exec(marking.marked(source, "g.py", 2, column), namespace)
    flag = marking.arm()
    assert namespace["g"](1) == 2 and flag == [True]


def test_lines_run_counts_the_mutants_lines_only(pristine):
    placed, mutant = place_register_mutant(pristine)
    saved = dict(pristine._POLICIES)
    try:
        # The mutated function runs (its early return taken) without the line after it: a
        # function that ran is not enough, as for a set-up guarded at its top.
        pristine._POLICIES.clear()
        with LinesRun(placed.values(), mutant.line + 2, mutant.line + 2) as skipped:
            pristine._ensure_registered()
        assert not skipped.ran
        with LinesRun(placed.values(), mutant.line, mutant.line) as seen:
            pristine._ensure_registered()
        assert seen.ran
        with LinesRun(placed.values(), mutant.line, mutant.line) as elsewhere:
            pristine.small(1)  # code not placed: never counted
        assert not elsewhere.ran
    finally:
        pristine._POLICIES.clear()
        pristine._POLICIES.update(saved)


@pytest.mark.parametrize("record, reached, expected", [
    ({"status": "survived", "ran": False}, True, True),
    ({"status": "equivalent", "ran": False, "what": "declared: x"}, True, True),
    ({"status": "survived", "ran": True}, True, False),     # it ran: the verdict holds
    ({"status": "killed", "ran": False}, True, False),
    ({"status": "survived", "ran": False}, False, False),   # never ran unmutated either
    ({"status": "survived", "ran": False, "fresh": True}, True, False),  # rerun already
    ({"status": "survived"}, True, False),                  # a results file from before
    ({"status": "equivalent", "what": "compiles to the original's code"}, True, False),
])
def test_only_survivors_whose_lines_never_ran_are_rerun_fresh(record, reached, expected):
    from kvfuzz.fuzz.engine.mutation.run import needs_fresh

    assert needs_fresh(record, reached) is expected


def test_the_report_counts_fresh_reruns_and_says_which_never_ran():
    from kvfuzz.fuzz.engine.mutation.report import lines

    def record(line, status, **more):
        return {"id": f"m:{line}:0:Op:0", "module": "m", "line": line, "function": "f",
                "operator": "Op", "status": status, **more}

    records = [record(1, "killed", fresh=True, forked="survived", ran=True),
               record(2, "survived", fresh=True, forked="survived", ran=False),
               record(3, "survived", ran=True), record(4, "killed", ran=True)]
    report = summary(records, {"target": "t", "impl": "i", "run": 4, "mutants": 4,
                               "cases": 5, "seed": 0})
    assert report["fresh"] == {"rerun": 2, "killed": 1} and report["score"] == 0.5
    text = "\n".join(lines(report, "kvfuzz mutate --only {id}"))
    assert "rerun fresh 2" in text and "1 killed there" in text
    never = "its lines never ran once it was in place, in a fresh process either"
    assert text.count(never) == 1 and text.index("m:2:0:Op:0") < text.index(never)


@pytest.mark.parametrize("start, flag", [(0, False), (300, True)])
def test_a_survivors_command_reruns_the_cases_it_ran(start, flag):
    # a run from --start 300 reran cases 0 to N otherwise: another mutant's verdict
    from kvfuzz.fuzz.engine.mutation.run import Options, _command

    command = _command(Options("kvmanager", "vllm.kvmanager", cases=20, seed=3, start=start))
    assert ("--start 300" in command) == flag
    assert "--cases 20 --seed 3" in command and command.endswith(" --only {id}")
