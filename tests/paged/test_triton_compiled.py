"""The Triton kernels beyond the interpreter: the interpreter is chosen only without CUDA, both
kernels compile for CUDA even on a machine without a GPU, upstream's kernels run by import path,
and (`gpu` marker, CUDA only) a compiled launch never syncs and one compilation serves every
batch size."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

import kvfuzz.impl.paged.triton_kernels as paged_triton
from kvfuzz.fuzz.targets import TARGETS as BY_NAME
from kvfuzz.impl import registry
from kvfuzz.impl.paged import upstream_sglang
from kvfuzz.impl.paged.calling import build_inputs, invoke
from kvfuzz.impl.registry import ImplementationError
from kvfuzz.oracle.paged.model import expected_for
from kvfuzz.strategies.paged.case import Case
from kvfuzz.strategies.paged.generators import generate
from tests.conftest import ROOT
from tests.helpers import fail_with, kvfuzz_here
from tests.paged.test_triton import (DEVICE, PRECONDITIONS, SEED, TARGETS, needs_cuda, selection,
                                     triton)


def run_python(code: str, env: dict) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow  # fresh interpreters
def test_interpreter_is_chosen_only_without_cuda_and_only_when_unset():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = run_python("import os, kvfuzz.impl.paged.triton_kernels as p; "
                     "print(os.environ.get('TRITON_INTERPRET'), type(p.extend_kernel).__name__)",
                     env)
    expected = "None JITFunction" if torch.cuda.is_available() else "1 InterpretedFunction"
    assert out.split() == expected.split()


COMPILE = """
import os
from triton import compile
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import kvfuzz.impl.paged.triton_kernels as p
assert type(p.extend_kernel).__name__ == "JITFunction"
pointers = ("prefix_ptr", "seq_ptr", "last_loc_ptr", "free_ptr", "out_ptr")
for kernel, steps in ((p.extend_kernel, {"BATCH_STEP": 512, "BLOCK": 1024}),
                      (p.decode_kernel, {"BATCH_STEP": 512})):
    for page_size in (1, 128):
        constexprs = {"page_size": page_size, **steps}
        signature = {name: ("constexpr" if name in constexprs else
                            "*i64" if name in pointers else "i32") for name in kernel.arg_names}
        binary = compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", 90, 32))
        print(kernel.__name__, page_size, sorted(binary.asm))
"""


@pytest.mark.slow  # a Triton compilation, in a process of its own
def test_kernels_compile_for_cuda_without_a_gpu(tmp_path):
    # The interpreter accepts code the compiler rejects (a loop-carried variable that changes
    # shape, for one): compile both kernels to a cubin for sm_90, no device needed.
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path)}
    lines = run_python(COMPILE, env).splitlines()
    assert len(lines) == 4 and all("cubin" in line for line in lines), lines


@pytest.mark.slow  # imports upstream SGLang
@pytest.mark.parametrize("target", TARGETS)
def test_upstream_kernels_by_import_path_agree_on_the_first_cases(target):
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("sglang is not installed (docs/upstream-sglang.md)")
    impl = BY_NAME[target].catalogue.resolve(f"kvfuzz.impl.paged.upstream_sglang:triton_{target}")
    assert impl.preconditions == PRECONDITIONS and not impl.safe_outside_contract
    for index in selection(target)[:20]:
        outcome = BY_NAME[impl.target].check(generate(target, SEED, index), impl, DEVICE)
        if outcome.divergence is not None:
            fail_with(outcome.divergence, save=False)


def test_upstream_kernels_without_sglang_fail_in_one_line(monkeypatch, tmp_path):
    """Loaded in the worker (a registered entry, by name or by path, is not imported before the
    run): the worker's failure to load it is the user's one-line error, exit 2."""
    monkeypatch.setitem(sys.modules, upstream_sglang.KERNELS, None)
    monkeypatch.setattr(registry, "_LOADED", {})  # as in a process that never loaded them
    upstream_sglang.kernels.cache_clear()
    try:
        with pytest.raises(ImplementationError) as error:
            BY_NAME["extend"].catalogue.resolve("sglang.triton").load()
        ran = kvfuzz_here("diff", "extend", "--impl",
                          "kvfuzz.impl.paged.upstream_sglang:triton_extend", "--cases", 3,
                          "--corpus", tmp_path)
    finally:
        upstream_sglang.kernels.cache_clear()
    assert "cannot import sglang.kernels" in str(error.value)
    assert "\n" not in str(error.value)
    assert ran.returncode == 2 and "cannot import sglang.kernels" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("target", TARGETS)
def test_compiled_launch_never_syncs(target):
    _, fn = triton(target)
    for index in selection(target)[:50]:
        case = generate(target, SEED, index)
        invoke(fn, case, build_inputs(case, "cuda"), "cuda")  # compiles outside the check
        inputs = build_inputs(case, "cuda")
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            invoke(fn, case, inputs, "cuda")
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert inputs["out_indices"].tolist() == expected_for(case).slots


@pytest.mark.gpu
@needs_cuda
def test_one_compilation_serves_every_batch_size_and_extend_length():
    # Batches past 512 requests also take the prefix-sum loop through several steps compiled.
    _, fn = triton("extend")
    compiled = []
    for batch, extend in ((1, 3), (7, 200), (32, 17), (513, 5), (1100, 9)):
        pages = 1 + extend // 16
        case = Case("extend", 16, (extend,) * batch, (-1,) * batch,
                    tuple(range(1, 1 + batch * pages)), prefix_lens=(0,) * batch)
        inputs = build_inputs(case, "cuda")
        # The allocator re-slices its pool: the pointer's alignment changes between calls.
        shift = batch % 3
        padded = torch.cat((inputs["free_pages"][:shift], inputs["free_pages"]))
        inputs["free_pages"] = padded[shift:]
        invoke(fn, case, inputs, "cuda")
        assert inputs["out_indices"].tolist() == expected_for(case).slots
        kernel_cache = paged_triton.extend_kernel.device_caches[torch.cuda.current_device()][0]
        compiled.append(len(kernel_cache))
    assert compiled[1:] == compiled[:1] * (len(compiled) - 1), compiled
