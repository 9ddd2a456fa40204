"""An allocator whose module takes SIGSEGV over when imported (as SGLang's tvm_ffi installs its
own handler), and which segfaults mid-trace: its crash report must still have its stack."""

import signal

from tests.engine.hostile import SegfaultsOnMerge  # noqa: F401

signal.signal(signal.SIGSEGV, signal.SIG_DFL)
