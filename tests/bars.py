"""How much of each seeded bar a run takes. The issues set bars of seeded traces on the released
classes: 2,000 of each prefix-cache class and core (issue 21), each kvmanager configuration and
each offloading policy (issue 24), 1,000 of each compaction implementation. All of them made
the tests 31 min of a 37 min CI run on 2 cores here (2026-12-07; 2,389 s on CI's machine), past
the 30 minutes CI must stay well under; their halves still left CI at 1,839 s there. So
`HYPOTHESIS_PROFILE=nightly` runs each bar whole, and CI's profile (and dev's) its first
quarter, the same indices a nightly run starts with (tests/README.md, "The seeded bars")."""

from __future__ import annotations

import os

NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"
MODE = "nightly" if NIGHTLY else "ci"
CI_SHARE = 4  # CI takes 1/CI_SHARE of each bar (a half until CI took 1,839 s, 2026-12-07)


def bar(whole: int) -> int:
    """The part of a bar of `whole` (shards, traces) this run takes: all of it nightly, else
    a quarter, rounded up."""
    return whole if NIGHTLY else -(-whole // CI_SHARE)
