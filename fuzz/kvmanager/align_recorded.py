"""The prefix-cache stats of a KV connector's admissions beside a Mamba "align" group (a trace
with `stats` and the connector's ops), recorded since 2026-12-07 as vLLM 0.33.0's scheduler
records them.

Read in `Scheduler.schedule` (`vllm/v1/core/sched/scheduler.py`): a waiting request with no
computed tokens is looked up (`did_prefix_cache_lookup`, 1107-1116) and, once `allocate_slots`
made its admission, `record_prefix_cache_stats(request, num_new_local_computed_tokens)`
(1509-1512): the local hit alone, after the connector's trim of a partial tail
(`truncate_computed_blocks`, 1166-1177) and whatever the connector loads, an asynchronous load
included (the record comes before its `load_kv_async` branch). The external tokens go to the
connector's own stats (`connector_prefix_cache_stats`), not the manager's. A loaded request's
first step has computed tokens: no lookup, nothing recorded (`_resume_loaded`). A one-token
prompt loaded whole is at 0 computed tokens again: looked up again, so its next admission
(the plain step or a load again) records its hit of 0 (`align_external_single.py`).

A mixin of `AlignLockstep`, before `AlignQueueChecks` and `AlignExternal`, whose admissions it
wraps; the record itself is `align_events.align_record`'s."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.lockstep import WAITING

EXTERNAL_RECORDED = "align: a connector's admission recorded"


class AlignRecorded:
    def _admit_external(self, op, request, local: int, external: int):
        problems = yield from super()._admit_external(op, request, local, external)
        if request.status != WAITING:  # made: loading, or running a synchronous load's step
            yield from self._recorded(op.rid, request, local)
        return problems

    def relooked_connect(self, op, request):
        problems = yield from super().relooked_connect(op, request)
        if request.status != WAITING:  # (its `relooked_resume` records its own)
            yield from self._recorded(op.rid, request, 0, not op.load or request.skip or
                                      not op.external)
        return problems

    def relooked_resume(self, rid, request, chunk: int, *padding):
        problems = yield from super().relooked_resume(rid, request, chunk, *padding)
        if request.status != WAITING:
            yield from self._recorded(rid, request, 0)
        return problems

    def _recorded(self, rid, request, hit: int, resumed: bool = False):
        """`align_record` of an admission made (nothing where `resumed`: recorded by the
        plain step's own wrap)."""
        if resumed or getattr(self, "align_stats", None) is None:
            return
        self.count(EXTERNAL_RECORDED)
        yield from self.align_record(rid, request, hit)
