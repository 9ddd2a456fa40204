"""How a release's `CPUOffloadingManager` is built and called, read from its classes (their
signatures and dataclass fields), never from a version number: the driver's side of what
impl/offload/release.py reads for the judge. Imports vLLM only inside `base_module`."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

from kvfuzz.impl.upstream_env import prepare_import

BASE = "vllm.v1.kv_offload.base"
BASE_0_20 = "vllm.v1.kv_offload.abstract"  # the same classes, before vLLM 0.21


def pool_keyword(cls) -> str:
    """The constructor's name for the pool's size: `num_chunks`, or `num_blocks` in vLLM
    before 0.30 (read from its signature)."""
    try:
        return "num_blocks" if "num_blocks" in inspect.signature(cls).parameters else \
            "num_chunks"
    except (TypeError, ValueError):
        return "num_chunks"


def constructor_keywords(cls, chunks: int, policy: str, events: bool, store_threshold: int,
                         tracker_size: int) -> dict:
    """The constructor's keywords, those it takes: no `store_threshold`, `max_tracker_size`
    before vLLM 0.22 (a trace with a threshold is outside that class's contract)."""
    wanted = {pool_keyword(cls): chunks, "cache_policy": policy, "enable_events": events,
              "store_threshold": store_threshold, "max_tracker_size": tracker_size}
    try:
        taken = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return wanted
    if any(p.kind is p.VAR_KEYWORD for p in taken.values()):
        return wanted
    return {name: value for name, value in wanted.items() if name in taken}


def takes_context(method) -> bool:
    """Whether a manager's method takes the request context (`touch`, `complete_load`,
    `complete_store` do from vLLM 0.21; 0.20's take the keys alone)."""
    try:
        return "req_context" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return True


def base_module():
    """vLLM's offloading base classes: `base.py`, or `abstract.py` in vLLM 0.20."""
    with prepare_import(BASE):
        try:
            return importlib.import_module(BASE)
        except ModuleNotFoundError as error:
            if error.name != BASE:
                raise
            return importlib.import_module(BASE_0_20)


def request_context(base, name: str):
    """A `ReqContext` named `name` where it has a `req_id` (vLLM 0.22 on), else a bare one."""
    fields = {f.name for f in dataclasses.fields(base.ReqContext)} \
        if dataclasses.is_dataclass(base.ReqContext) else {"req_id"}
    return base.ReqContext(req_id=name) if "req_id" in fields else base.ReqContext()
