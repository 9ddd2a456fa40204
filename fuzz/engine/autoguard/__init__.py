"""`kvfuzz guard TARGET -- COMMAND`: the live guard switched on inside an engine without a change
to its code. The command runs with this folder first on PYTHONPATH, so every Python process it
starts (vLLM's engine core runs in a process of its own) imports `sitecustomize.py` from here
at start-up; that module replaces each construction site named in `KVFUZZ_GUARD_SITES` (a
module's global the engine builds the object by, e.g. `vllm.v1.core.sched.scheduler:
KVCacheManager`) as the module is imported, with a factory whose objects come back through
`wrap` below: guarded (`KVFUZZ_GUARD_MODE=guard`) or recorded (`record`, the trace saved when
the process exits).

The environment (set by the command; `kvfuzz guard TARGET --env` prints it):
  KVFUZZ_GUARD_SITES        module:name=target[,...]
  KVFUZZ_GUARD_MODE         guard (default) or record
  KVFUZZ_GUARD_CORPUS       where a divergence (or a recording) is saved (default corpus/)
  KVFUZZ_GUARD_UNSUPPORTED  raise (default): a call the trace cannot model raises
                            GuardUnsupported; stop: one warning, then calls go through
                            unchecked
"""

from __future__ import annotations

import atexit
import inspect
import os
import sys

FOLDER = os.path.dirname(os.path.abspath(__file__))
# The settings a guard takes besides these are read from the constructor's keywords.
_OWN = {"check", "impl", "corpus", "on_unsupported"}


def wrap(obj, target: str, constructor_kwargs: dict):
    """`obj`, just built by the engine, guarded or recorded as the environment says."""
    from kvfuzz.fuzz.engine.guard import live_guard

    guard = live_guard(target)
    wanted = set(inspect.signature(guard).parameters) - _OWN
    settings = {k: v for k, v in constructor_kwargs.items() if k in wanted}
    corpus = os.environ.get("KVFUZZ_GUARD_CORPUS") or "corpus"
    if os.environ.get("KVFUZZ_GUARD_MODE", "guard") == "record":
        wrapped = guard(obj, check=False, **settings)
        atexit.register(_save_recording, wrapped.kvfuzz_session, corpus)
        return wrapped
    return guard(obj, check=True, corpus=corpus,
                 on_unsupported=os.environ.get("KVFUZZ_GUARD_UNSUPPORTED", "raise"), **settings)


def _save_recording(session, corpus: str) -> None:
    if session.ops:
        path = session.save(corpus)
        print(f"kvfuzz guard: recorded {len(session.ops)} ops of {session.target.name} in "
              f"{path}", file=sys.stderr)
