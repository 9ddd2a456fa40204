"""Writes a line to the file $KVFUZZ_TEST_LOG when imported ("import PID") and on every call
("call PID"), and crashes on batches of three requests or more: a run has many crashes, so many
fresh processes for this implementation, and the log says how many imports they cost."""
import ctypes
import os

from kvfuzz.impl.paged.vectorized import alloc_extend as _correct


def _log(what: str) -> None:
    with open(os.environ["KVFUZZ_TEST_LOG"], "a") as handle:
        handle.write(f"{what} {os.getpid()}\n")


_log("import")


def alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    _log("call")
    _correct(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device)
    if prefix_lens.shape[0] >= 3:
        ctypes.string_at(0)
