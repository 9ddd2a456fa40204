"""Broken variants of the Triton kernels: each is the source of `triton_kernels.py` with ONE
edit inside one kernel, written to a temporary file (`@triton.jit` needs a real source file) and
imported on first use. An edit that no longer matches exactly once fails loudly, so the
catalogue cannot silently drift from the kernel it breaks.

Not here: a masked load without `other=`. The interpreter fills masked lanes with 0 whatever
`other` is (triton 3.7.1 `interpreter.py`, `create_masked_load`), so that fault is invisible on
CPU; `garbage_lanes` injects what a GPU may read there instead.
"""

from __future__ import annotations

import ast
import atexit
import functools
import importlib.util
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import kvfuzz.impl.paged.triton_kernels as original


@dataclass(frozen=True)
class Mutation:
    kernel: str
    old: str
    new: str
    why: str

    def apply(self, source: str) -> str:
        start, end = _function_span(source, self.kernel)
        body = source[start:end]
        found = body.count(self.old)
        if found != 1:
            raise RuntimeError(f"mutation {self.old!r} -> {self.new!r}: found {found} times in "
                               f"{self.kernel} (expected 1); update impl/paged/triton_mutants.py")
        return source[:start] + body.replace(self.old, self.new) + source[end:]


MUTATIONS = {
    "inclusive_prefix": Mutation(
        "extend_kernel", "earlier = lane < pid", "earlier = lane <= pid",
        "prefix sums include the request itself (inclusive, not exclusive)"),
    "garbage_lanes": Mutation(
        "extend_kernel", "seq_k = tl.load(seq_ptr + lane, mask=earlier, other=0)",
        "seq_k = tl.load(seq_ptr + lane, mask=earlier, other=1)",
        "masked prefix-sum lanes read 1, not 0 (a load without other= on a GPU)"),
    "phase2_at_start": Mutation(
        "extend_kernel", "pos2 = out_start + num1 + offset", "pos2 = out_start + offset",
        "whole-page phase starts writing at the request's first slot, over phase 1"),
    "last_page_plus_one": Mutation(
        "extend_kernel", "index3 = page_start + num2 // page_size",
        "index3 = page_start + num2 // page_size + 1",
        "last partial page taken one pool entry past the request's slice"),
    "inclusive_rank": Mutation(
        "decode_kernel", "before = lane < pid", "before = lane <= pid",
        "page rank counts the request itself"),
    "counts_masked": Mutation(
        "decode_kernel", "openers += (before & ((seq_k - 1) % page_size == 0))",
        "openers += (((seq_k - 1) % page_size == 0))",
        "masked lanes (seq 0) counted as page openers: wrong only when page_size is 1"),
}


def _function_span(source: str, name: str) -> tuple[int, int]:
    """Character offsets [start, end) of top-level function `name` in `source`."""
    lines = source.splitlines(keepends=True)
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            start = sum(len(line) for line in lines[:node.lineno - 1])
            return start, sum(len(line) for line in lines[:node.end_lineno])
    raise RuntimeError(f"no function {name} in {original.__file__}")


@functools.cache
def _directory() -> Path:
    path = Path(tempfile.mkdtemp(prefix="kvfuzz-triton-mutants-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.cache
def mutant_module(name: str):
    """The kernel module with mutation `name` applied, imported from a temporary file."""
    source = MUTATIONS[name].apply(Path(original.__file__).read_text())
    path = _directory() / f"paged_triton_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"kvfuzz.impl.paged._triton_mutant_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _extend(name: str):
    def alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
        mutant_module(name).alloc_extend(prefix_lens, seq_lens, last_loc, free_pages,
                                         out_indices, page_size, device)
    alloc_extend.__doc__ = MUTATIONS[name].why
    return alloc_extend


def _decode(name: str):
    def alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size, num_new_pages):
        mutant_module(name).alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size,
                                         num_new_pages)
    alloc_decode.__doc__ = MUTATIONS[name].why
    return alloc_decode


extend_inclusive_prefix = _extend("inclusive_prefix")
extend_garbage_lanes = _extend("garbage_lanes")
extend_phase2_at_start = _extend("phase2_at_start")
extend_last_page_plus_one = _extend("last_page_plus_one")
decode_inclusive_rank = _decode("inclusive_rank")
decode_counts_masked = _decode("counts_masked")
