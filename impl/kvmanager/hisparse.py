"""HiSparse's groups and its connector's calls for the kvmanager driver (`driver.py`), in plain
ints: the four groups as vLLM lays them out, the coordinator's per-step residency work and the
worker's report of write-backs done, and the host pool's reader. Imports vLLM when called."""

from __future__ import annotations

from kvfuzz.impl.blockpool.driver import PoolReader


def hisparse_groups(block_size: int, shape: dict) -> list:
    """HiSparse's groups as its engine lays them out (vLLM's own tests build the same): the
    source (full attention, on the host pool, role HISPARSE_SOURCE), the indexer (full
    attention on the device), the resident pages and a hot region of two blocks a request."""
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, HiSparseHotSpec,
                                            HiSparseResidentSpec, KVCacheGroupRole,
                                            KVCacheGroupSpec)

    spec = FullAttentionSpec(block_size=block_size, **shape)
    page = block_size * 4
    return [KVCacheGroupSpec(["source"], spec, role=KVCacheGroupRole.HISPARSE_SOURCE,
                             host_resident=True),
            KVCacheGroupSpec(["indexer"], spec, role=KVCacheGroupRole.HISPARSE_INDEXER),
            KVCacheGroupSpec(["resident"], HiSparseResidentSpec(block_size=block_size,
                                                                page_size=page)),
            KVCacheGroupSpec(["hot"], HiSparseHotSpec(block_size=block_size, page_size=page,
                                                      blocks_per_request=2))]


class HiSparseCalls:
    """What HiSparse's connector asks of its coordinator each step, in plain ints: the
    residency work after a request's allocation (`advance_scheduled`, then the write-backs it
    planned, `build_offload_command`), and the worker's report of write-backs done
    (`update_spills`, every worker once); and the host pool's reads."""

    def __init__(self, manager, host_blocks: int):
        from vllm.v1.hisparse.coordinator import get_hisparse_coordinator

        self.coordinator = get_hisparse_coordinator(manager)
        self.host = PoolReader(self.coordinator.get_host_block_pool(), host_blocks)

    def step(self, request_id: str, num_tokens: int) -> list[tuple[int, int]]:
        """The write-backs the step planned: (transfer id, host block)."""
        self.coordinator.advance_scheduled([(request_id, num_tokens)])
        return self.planned()

    def import_done(self, request_id: str, failed: bool) -> None:
        """Another connector's load into the host pool reported (`finished_recving`, failed or
        not), as HiSparse's connector passes it on (`update_connector_output`)."""
        self.coordinator.finish_host_import(request_id, failed=failed)

    def planned(self) -> list[tuple[int, int, list[int]]]:
        """The transfers planned since the last command (the next step's
        `build_offload_command`): (transfer id, host block, its resident blocks)."""
        command = self.coordinator.build_offload_command()
        return [] if command is None else [(int(t.transfer_id), int(t.host_block_id),
                                            list(map(int, t.resident_block_ids)))
                                           for t in command.page_transfers]

    def residency(self, request_id: str) -> list[int]:
        """The request's resident pages as the worker reads them (the resident group's table
        with the coordinator's residency changes: a page read from the host is 0, the null
        block; an adopted GPU copy is its block), `get_residency_row`."""
        manager = self.coordinator.resident_managers[0]
        return [int(block.block_id) for block in manager.get_residency_row(request_id)]

    def take_copies(self) -> list[tuple[int, int]]:
        """The host copy-on-write copies the connector hands the worker with the step's command
        (`take_host_block_copies`, after `build_offload_command`): (source, destination)
        blocks, both retained until released."""
        return [(int(c.src_block_id), int(c.dst_block_id))
                for c in self.coordinator.take_host_block_copies()]

    def release_copies(self, destinations) -> None:
        """The worker's report of host copies run (`completed_host_copy_dst_ids`, the ranks'
        union), passed on before its write-backs (`update_connector_output`)."""
        self.coordinator.release_completed_host_copies([int(d) for d in destinations])

    def report(self, enqueued, completed) -> None:
        """A report of the worker's ranks summed (`HiSparseConnectorWorkerMetadata.aggregate`):
        (transfer id, ranks) pairs enqueued, and completed, this step."""
        self.coordinator.update_spills({int(t): int(n) for t, n in enqueued},
                                       {int(t): int(n) for t, n in completed})


class HiSparseDriving:
    """`KVManagerDriver`'s calls of HiSparse's coordinator and host pool (a mixin: its
    `hisparse`, a `HiSparseCalls`, and `requests`)."""

    def hisparse_step(self, rid: int, num_tokens: int) -> list[tuple[int, int, list[int]]]:
        """HiSparse's residency work after `rid`'s allocation, its tokens computed once the step
        completes `num_tokens`: the write-backs planned, (transfer id, host block, resident
        blocks)."""
        return self.hisparse.step(self.requests[rid].request_id, num_tokens)

    def hisparse_import_done(self, rid: int, failed: bool) -> None:
        """A KV connector's import into HiSparse's host pool reported done (or failed)."""
        self.hisparse.import_done(self.requests[rid].request_id, failed)

    def hisparse_planned(self) -> list[tuple[int, int, list[int]]]:
        """The transfers HiSparse planned outside a step (an import's restore), as the next
        step's command carries them: (transfer id, host block, resident blocks)."""
        return self.hisparse.planned()

    def hisparse_residency(self, rid: int) -> list[int]:
        """`rid`'s resident pages as the worker reads them (0: read from the host)."""
        return self.hisparse.residency(self.requests[rid].request_id)

    def hisparse_copies(self) -> list[tuple[int, int]]:
        """The host copies taken after a step's command (`HiSparseCalls.take_copies`)."""
        return self.hisparse.take_copies()

    def hisparse_copies_done(self, destinations) -> None:
        self.hisparse.release_copies(destinations)

    def hisparse_report(self, enqueued, completed) -> None:
        """The worker's report of a step (on time, or late or in parts): [transfer id, ranks]
        pairs of the transfers enqueued, and of those completed (`update_spills`' two
        counts)."""
        self.hisparse.report(enqueued, completed)

    def host_pool(self) -> dict:
        """The HiSparse host pool's state: free count and queue, reference counts, entries."""
        host = self.hisparse.host
        queue, links = host.free_queue()
        return {"num_free": host.num_free(), "queue": queue, "links": links,
                "ref": host.ref_counts(), "keys": host.keys(), "cache": host.cache_map()}
