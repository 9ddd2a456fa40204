"""vLLM's CPU offloading connector (`OffloadingConnector`, vllm 0.33.0) in the scheduler's
session (`vllm_scheduler.py`): its scheduler side is vLLM's own, built by vLLM's `Scheduler`
from a `KVTransferConfig`; its worker side (the GPU-CPU copies) cannot run here, so this
double answers for it the way a worker that finishes every transfer within the step would:

- every transfer job in the step's `OffloadingConnectorMetadata` (loads and stores) is
  reported completed once (`OffloadingWorkerMetadata.completed_jobs`, one worker);
- a request whose load was asynchronous is reported received (`finished_recving`), so the
  scheduler admits it with its external hit;
- a request that finished while its stores were in flight (the scheduler keeps its blocks:
  `request_finished` delayed their free) is reported sent (`finished_sending`) at the next
  step, and the scheduler frees its blocks then.

What this exercises of the manager and the pool: lookups for the connector
(`get_computed_blocks_for_connector`), admissions with external tokens and delayed caching,
the connector's pins of the blocks a store reads (`touch`), and frees held back for a store.
"""

from __future__ import annotations


def connector_config(cpu_bytes: int):
    """The engine's setting for the CPU offloading connector with `cpu_bytes` of CPU memory
    (vLLM's `kv_connector_extra_config["cpu_bytes_to_use"]`)."""
    from vllm.config import KVTransferConfig

    return KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                            engine_id="kvfuzz", kv_connector_extra_config={
                                "cpu_bytes_to_use": cpu_bytes})


class InstantWorker:
    """The worker's reports, step by step (`output` before `update_from_output`, `after`
    once it returned); `loads` and `stores` count the jobs it completed."""

    def __init__(self):
        self.loads = self.stores = 0
        self.held: set[str] = set()  # finished requests whose blocks wait for their stores

    def output(self, scheduler_output):
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
            OffloadingWorkerMetadata)
        from vllm.v1.outputs import KVConnectorOutput

        meta = scheduler_output.kv_connector_metadata
        if meta is None:
            return None
        self.loads += len(meta.load_jobs)
        self.stores += len(meta.store_jobs)
        received = {job.req_id for job in meta.load_jobs.values() if not job.sync}
        done = {job: 1 for job in (*meta.load_jobs, *meta.store_jobs)}
        return KVConnectorOutput(finished_sending=set(self.held) or None,
                                 finished_recving=received or None,
                                 kv_connector_worker_meta=OffloadingWorkerMetadata(
                                     completed_jobs=done))

    def after(self, scheduler, requests) -> None:
        """The finished requests the scheduler still holds: sent at the next step."""
        self.held = {request.request_id for request in requests
                     if request.is_finished() and request.request_id in scheduler.requests}
