"""SGLang's SWA allocator before 0.5.19, read from its API: what its release calls promise where
they differ from today's (oracle/swa/contract.py), by the names of `contract.BY_NAME`. No torch,
no SGLang: the class is handed in.

- no `free_full` (0.5.10-0.5.18): the scheduler of the day released a finished request's row
  with one `free` of the whole row ("row_free"; the lock step makes that call);
- and `free_swa` naming no free group in its code (0.5.10-0.5.17: no `swa_free_group`, no
  `is_not_in_free_group`; the class inherits the base's group, which holds `free` only): a
  window's SWA slots are released at the call inside a group too ("swa_at_once").
A class with `free_full` (0.5.19 on, and every outside class with today's calls) has today's
contract: nothing is read from it."""

from __future__ import annotations


def contract_names(cls) -> tuple[str, ...]:
    if callable(getattr(cls, "free_full", None)):
        return ()
    names = ("row_free",)
    free_swa = getattr(cls, "free_swa", None)
    code = getattr(getattr(free_swa, "__func__", free_swa), "__code__", None)
    if code is not None and not any("free_group" in name for name in code.co_names):
        names += ("swa_at_once",)
    return names
