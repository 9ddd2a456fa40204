"""Calls an extend/decode implementation on a `Case` the way a scheduler would, and hands back
plain ints. Tensors are built here and read back once, after the call, so the read-back never
hides a host sync inside the code under test.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Written into the output buffer before the call: a slot the implementation leaves alone keeps
# it, and no real slot can be negative.
UNWRITTEN = -(2**63)


@dataclass(frozen=True)
class CallResult:
    slots: list[int]
    mutated_inputs: tuple[str, ...]  # input tensors the call changed (it must change none)
    out_changed: str = ""  # the output buffer's shape or dtype changed ("shape (4,) -> (5,)")


def build_inputs(case, device: str = "cpu") -> dict:
    """The tensors of a call; decode gets the exact new-page count a correct caller passes."""
    def tensor(values):
        return torch.tensor(list(values), dtype=torch.int64, device=device)

    inputs = {"seq_lens": tensor(case.seq_lens), "last_loc": tensor(case.last_loc),
              "free_pages": tensor(case.free_pages)}
    if case.target == "extend":
        inputs["prefix_lens"] = tensor(case.prefix_lens)
    inputs["out_indices"] = torch.full((case.output_length(),), UNWRITTEN, dtype=torch.int64,
                                       device=device)
    return inputs


def invoke(fn, case, inputs: dict, device: str = "cpu") -> None:
    """One call with the upstream argument order of `alloc_extend_naive` / `alloc_decode_naive`."""
    if case.target == "extend":
        fn(inputs["prefix_lens"], inputs["seq_lens"], inputs["last_loc"], inputs["free_pages"],
           inputs["out_indices"], case.page_size, device)
    else:
        # P == 1 is counted exactly here (every token opens a page): upstream's
        # get_num_new_pages returns 0 for it (spec §3), which no correct caller may pass.
        num_new_pages = sum(1 for s in case.seq_lens if (s - 1) % case.page_size == 0)
        fn(inputs["seq_lens"], inputs["last_loc"], inputs["free_pages"], inputs["out_indices"],
           case.page_size, num_new_pages)


def call(fn, case, device: str = "cpu") -> CallResult:
    """Run `fn` on `case`; exceptions propagate to the caller, which reports them."""
    inputs = build_inputs(case, device)
    originals = {name: value.clone() for name, value in inputs.items() if name != "out_indices"}
    out = inputs["out_indices"]
    shape, dtype = tuple(out.shape), out.dtype
    invoke(fn, case, inputs, device)
    mutated = tuple(name for name, value in originals.items()
                    if not _same(value, inputs[name]))
    changed = [f"{what} {before} -> {after}" for what, before, after in
               (("shape", shape, tuple(out.shape)), ("dtype", dtype, out.dtype)) if before != after]
    return CallResult(out.reshape(-1).tolist(), mutated, ", ".join(changed))


def _same(before: torch.Tensor, after: torch.Tensor) -> bool:
    return (before.dtype == after.dtype and before.shape == after.shape
            and torch.equal(before, after))
