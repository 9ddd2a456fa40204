"""Where Triton kernels run: compiled on CUDA, or on the CPU through Triton's interpreter.

Triton picks interpreter or compiler when `@triton.jit` decorates a kernel (it reads
`TRITON_INTERPRET` then, triton 3.7.1 `runtime/jit.py`), so a module defining kernels must call
`use_interpreter_without_cuda()` before its first `@triton.jit`, and the kernels it defines stay
interpreted or compiled for the life of the process.
"""

from __future__ import annotations

import os

VARIABLE = "TRITON_INTERPRET"


def use_interpreter_without_cuda() -> bool:
    """Set TRITON_INTERPRET=1 when it is unset and torch sees no CUDA device. An explicit value
    (0 or 1) is always left alone. Returns whether kernels defined from now on are interpreted."""
    if VARIABLE not in os.environ:
        import torch  # only here: a module importing this one may want to set the variable first

        if not torch.cuda.is_available():
            os.environ[VARIABLE] = "1"
    return interpreting()


def interpreting() -> bool:
    from triton import knobs  # Triton's own reading of the variable, not a copy of its rules

    return bool(knobs.runtime.interpret)
