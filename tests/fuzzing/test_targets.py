"""Each atheris target runs a bounded number of inputs with zero failures on the bundled
implementations, and the extend target stops on a mutant with the case saved as JSON first.
(The per-campaign smoke runs belong in .ci/run, not here.)"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.campaign.specs import SPECS
from kvfuzz.fuzz.campaign.harness import DifferentialHarness
from kvfuzz.fuzz.targets import EXTEND, TARGETS


# The libFuzzer runs need atheris (the `fuzz` extra): `pip install -e '.[test,fuzz]'`.
needs_atheris = pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                                   reason="atheris not installed (pip install -e '.[fuzz]')")


def _run(command, tmp_path, *flags, impl: str = ""):
    env = dict(os.environ, KVFUZZ_FOUND=str(tmp_path / "found"), KVFUZZ_IMPL=impl,
               OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *command, *flags,
                           f"-artifact_prefix={tmp_path}/"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


# Trace targets (allocator, compaction) are checked in process below; their libFuzzer smoke
# runs live in .ci/run with the others, to keep this file's share of the suite small.
@pytest.mark.slow  # libFuzzer runs, each in a process of its own
@needs_atheris
@pytest.mark.parametrize("name", ["extend", "decode", "case_loader"])
def test_target_runs_clean_on_bundled_implementations(name, tmp_path):
    result = _run(SPECS[name].command, tmp_path, "-runs=150", "-seed=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done 150 runs" in result.stderr
    assert not (tmp_path / "found").exists()


@pytest.mark.slow
@needs_atheris
def test_extend_target_saves_the_case_then_raises_on_a_mutant(tmp_path):
    seed = tmp_path / "seeds"
    seed.mkdir()
    # A zero-length request before others: the case the mutant gets wrong, as fuzzer bytes.
    from kvfuzz.strategies.paged.bytes_chooser import encode
    from kvfuzz.strategies.paged.case import Case
    case = Case("extend", 2, (0, 0, 2), (-1, -1, 4), (1,), prefix_lens=(0, 0, 1))
    (seed / "one").write_bytes(encode(case))
    result = _run(SPECS["extend"].command, tmp_path, str(seed), "-runs=50",
                  impl="mutant.owner_left_bisect")
    assert result.returncode != 0
    output = result.stdout + result.stderr  # atheris prints the exception on stdout
    assert "DIVERGENCE  extend  implementation mutant.owner_left_bisect" in output
    saved = corpus.input_files([tmp_path / "found"])
    assert [corpus.load(path) for path in saved] == [(EXTEND, case)]


@pytest.mark.slow
@needs_atheris
def test_the_oss_fuzz_build_writes_a_fuzzer_per_target_that_runs(tmp_path):
    """oss-fuzz/build.sh writes each target's fuzzer from its printf template: the script it
    writes for a trace target fuzzes that target."""
    build = (Path(__file__).parents[2] / "oss-fuzz" / "build.sh").read_text()
    template = re.search(r"printf '([^']+)'", build).group(1)
    script = tmp_path / "fuzz_mamba.py"
    script.write_text(template.replace("\\n", "\n") % "mamba")
    result = _run([script], tmp_path, "-runs=20", "-seed=1")
    assert result.returncode == 0 and "Done 20 runs" in result.stderr, result.stderr[-3000:]


@pytest.mark.slow  # a process of its own
def test_the_entry_script_names_an_unknown_target_in_one_line(tmp_path):
    result = _run(SPECS["extend"].command[:1] + ["nosuch"], tmp_path)
    assert result.returncode == 2 and "unknown target 'nosuch'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("target, mutant", [("allocator", "mutant.allocator.padding_page"),
                                            ("compaction", "mutant.compaction.p2v_not_cleared")])
def test_trace_targets_pass_the_real_allocator_and_catch_a_mutant(target, mutant, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("KVFUZZ_FOUND", str(tmp_path / "found"))
    rng = random.Random(4)
    inputs = [rng.randbytes(rng.choice((0, 16, 256, 1024))) for _ in range(12)]
    monkeypatch.delenv("KVFUZZ_IMPL", raising=False)  # the target's default implementations
    clean = DifferentialHarness(TARGETS[target])
    for data in inputs:
        clean.test_one_input(data)
    monkeypatch.setenv("KVFUZZ_IMPL", mutant)
    broken = DifferentialHarness(TARGETS[target])
    with pytest.raises(AssertionError, match=mutant):
        for data in inputs:
            broken.test_one_input(data)
    assert len(list((tmp_path / "found").iterdir())) == 1


@pytest.mark.slow
@needs_atheris
def test_campaign_with_relative_directories_runs_its_worker(tmp_path):
    # The workers run inside the work directory: a relative --work once made every worker fail
    # to find its byte corpus, and the campaign executed nothing.
    result = subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", "fuzz", "decode", "--time",
                             "4s", "--jobs", "1", "--work", "work", "--corpus", "found"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "WORKER CRASHES" not in result.stderr and "executions       0 " not in result.stderr


def _interrupted_mid_call():
    from kvfuzz.impl.mamba.slot_allocator import MambaSlots

    class InterruptedMidCall(MambaSlots):
        """A Mamba slot allocator during whose call the campaign's SIGINT arrives."""

        def alloc(self, need_size):
            os.kill(os.getpid(), signal.SIGINT)
            return super().alloc(need_size)
    return InterruptedMidCall


def __getattr__(name):  # the class is built on use: importing this module imports no torch
    if name == "InterruptedMidCall":
        return _interrupted_mid_call()
    raise AttributeError(name)


def test_a_campaigns_stop_signal_mid_call_is_no_finding(tmp_path, monkeypatch):
    """`kvfuzz fuzz` stops a worker with SIGINT; arriving inside an implementation's call, it
    once became that implementation's "raised KeyboardInterrupt" divergence, saved as found.

    The worker's SIGINT disposition is set as a campaign worker has it (the campaign catches
    SIGINT, so the exec'd worker starts with the default, and Python installs its handler), not
    inherited from whatever ran pytest: started from a shell's background job, the test
    process has SIGINT ignored, and the signal sent below used to vanish (issue 29)."""
    monkeypatch.setenv("KVFUZZ_FOUND", str(tmp_path / "found"))
    monkeypatch.setenv("KVFUZZ_IMPL", f"{__name__}:InterruptedMidCall")
    monkeypatch.setitem(sys.modules, "atheris", sys)  # as in an atheris worker
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        harness = DifferentialHarness(TARGETS["mamba"])
        with pytest.raises(KeyboardInterrupt):
            harness.test_one_input(bytes(range(256)) * 4)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert harness.stopped and not (tmp_path / "found").exists()
