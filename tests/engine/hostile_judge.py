"""Implementations that tell kvfuzz's own judge what to conclude: each patches kvfuzz at import,
in whatever process imports it. Only ever named by import path to a kvfuzz process (importing
this module in a test's own process would patch that process's kvfuzz)."""

from __future__ import annotations

from kvfuzz.impl.allocator.paged_allocator import PagedAllocator
from tests.engine.hostile import _hostile


def _agree_always(*args, **kwargs):
    return None


def _claim_agreement(self, target, item, impl, device="cpu"):
    from kvfuzz.fuzz.engine.target import AGREE, Outcome

    return Outcome(AGREE)


def _patch_the_judge() -> None:
    import kvfuzz.fuzz.paged.check as paged_check
    from kvfuzz.fuzz.engine.trace_target import LockstepJudge

    paged_check.compare = _agree_always  # "no slot differs", whatever came back
    LockstepJudge.check = _claim_agreement  # "the trace agrees", without running it


_patch_the_judge()

# wrong slots on batches of three or more, with kvfuzz's comparison told to see none
patches_the_judge = _hostile(lambda out: out.add_(1))


class ClaimsAgreement(PagedAllocator):
    """A wrong allocator (it frees nothing) whose module has kvfuzz's trace judge say that every
    trace agrees, without running it."""

    def free(self, free_index):
        return None
