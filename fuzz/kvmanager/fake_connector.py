"""A deterministic fake KV connector for vLLM's v1 scheduler on the CPU (`vllm_scheduler.py`,
`Workload(fake_connector=True)`): vLLM builds it by name from a `KVTransferConfig`
(`kv_connector_module_path` this module), its answers drawn from a seeded stream, so a session
replays; `FakeWorker` answers for its worker side.

What it makes the scheduler do to the manager, beyond what the CPU offloading connector does
(which loads only what it stored, synchronously or at once): lookups through
`get_computed_blocks_for_connector` (it says it takes divergent hybrid hits), admissions with
external tokens on most requests, half of them asynchronous loads that stay in flight one to
three steps (several at once, so the scheduler reserves blocks for the prefills in flight),
whole prompts loaded (their last token recomputed), failed loads (one in seven fails whole,
`failed_recving`; one in five at a block of its external ones, `invalid_block_ids`: the
scheduler keeps the prefix before it), and frees held back for a transfer (`request_finished`
delays three in ten, never one whose load is in flight: its free waits for the load).
`FakeWorker(seed, aborts=p)` also aborts a request whose load is in flight, each step with
probability `p` (the scheduler frees it when its load is reported).

The class is built on first use (the module's `__getattr__`): importing this module imports no
vLLM.
"""

from __future__ import annotations

import random

NAME = "KvfuzzFakeConnector"
# The same over several KV-cache groups (vLLM's hybrid manager: `SupportsHMA`): its loads write
# some groups only at times (`get_loaded_kv_cache_group_ids`), and fail whole or not at all
# (vLLM's scheduler refuses a failed block beside several groups: block ids are per group).
HYBRID_NAME = "KvfuzzFakeHybridConnector"


def connector_config(seed: int, sync_failures: bool = False, hybrid: bool = False,
                     delivery: bool = False, producer: bool = False, async_only: bool = False):
    """The engine's setting for the fake connector, its answers seeded by `seed`;
    `sync_failures`: three synchronous loads in ten fail at a block (drawn only then, so the
    other sessions stay as they were); `hybrid`: the one over several groups; `delivery`: it
    requires KV delivery (`requires_kv_delivery`: the scheduler's preemptions then drop their
    stale output); `producer`: a KV producer alone (`kv_producer`: not a consumer, so vLLM
    does not defer block frees under overlapping batches); `async_only`: its synchronous answers
    made plain admissions through it (no external tokens), as the "mamba connector" profile
    makes them beside a Mamba "align" group, where vLLM 0.33.0 counts a synchronous load's
    Mamba blocks one short (docs/upstream-vllm.md; the draws stay the same)."""
    from vllm.config import KVTransferConfig

    # "recompute": a failed load is loaded again or recomputed (the default, "fail", finishes
    # the request with an error: an abort during its load)
    return KVTransferConfig(kv_connector=HYBRID_NAME if hybrid else NAME,
                            kv_connector_module_path=__name__,
                            kv_role="kv_producer" if producer else "kv_both",
                            engine_id="kvfuzz",
                            kv_load_failure_policy="recompute",
                            kv_connector_extra_config={"seed": seed,
                                                       "sync_failures": sync_failures,
                                                       "delivery": delivery,
                                                       "async_only": async_only})


def matched_tokens(rng: random.Random, num_tokens: int, num_computed: int,
                   block_size: int) -> tuple[int, bool]:
    """What the connector holds past the local hit: (external tokens, loaded asynchronously).
    A synchronous load leaves the scheduler at least one token to compute."""
    if rng.random() < 0.3:
        return 0, False
    load = rng.random() < 0.5
    most = num_tokens - num_computed - (0 if load else 1)
    if most <= 0:
        return 0, False
    return rng.choice((rng.randint(1, most), min(most, block_size * rng.randint(1, 3)),
                       most)), load


def _build():
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                   KVConnectorMetadata,
                                                                   SupportsHMA)

    class FakeMetadata(KVConnectorMetadata):
        """The step's transfers: loads started (request id -> (steps they take, the block that
        fails or None, whether the whole load fails), requests whose free waits for a
        transfer, and the failed blocks of this step's synchronous loads."""

        def __init__(self, loads: dict[str, tuple], sending: set[str], invalid: set[int]):
            self.loads, self.sending, self.invalid = loads, sending, invalid

    class KvfuzzFakeConnector(KVConnectorBase_V1):
        def __init__(self, vllm_config, role, kv_cache_config=None):
            super().__init__(vllm_config, role, kv_cache_config)
            extra = self._kv_transfer_config.kv_connector_extra_config
            self._rng = random.Random(f"kvfuzz fake connector {extra.get('seed', 0)}")
            self._block_size = vllm_config.cache_config.block_size
            self._loading: dict[str, int] = {}    # answered "asynchronous", not allocated yet:
                                                  # request id -> its local hit
            self._started: dict[str, tuple] = {}  # loads allocated this step
            self._sending: set[str] = set()       # frees held back since the last step
            self._receiving: set[str] = set()     # loads started, not reported yet
            self._sync_failures = bool(extra.get("sync_failures"))
            self._async_only = bool(extra.get("async_only"))
            self._sync: dict[str, int] = {}       # answered "synchronous": id -> its local hit
            self._invalid: set[int] = set()       # blocks of this step's synchronous loads
                                                  # that failed
            self._failed_blocks = True            # loads may fail at a block (one group)

        @property
        def supports_divergent_local_hybrid_hits(self) -> bool:
            return True  # the scheduler looks up through get_computed_blocks_for_connector

        @property
        def requires_kv_delivery(self) -> bool:
            return bool(self._kv_transfer_config.kv_connector_extra_config.get("delivery"))

        def get_num_new_matched_tokens(self, request, num_computed_tokens):
            external, load = matched_tokens(self._rng, request.num_tokens,
                                            num_computed_tokens, self._block_size)
            # (drawn all the same: the stream stays; a one-token prompt loaded whole, then
            # looked up again while it holds its blocks, is modelled since 2026-12-07:
            # `align_external_single.py`)
            if self._async_only and not load:
                external, load = 0, False
            self._loading.pop(request.request_id, None)
            self._sync.pop(request.request_id, None)
            if load:
                self._loading[request.request_id] = num_computed_tokens
            elif external and self._sync_failures:
                self._sync[request.request_id] = num_computed_tokens
            return external, load

        def update_state_after_alloc(self, request, blocks, num_external_tokens):
            synced = self._sync.pop(request.request_id, None)
            if num_external_tokens and synced is not None and self._rng.random() < 0.3:
                # a synchronous load failing at one of its blocks: reported this step, the
                # scheduler recomputes from that block on
                ids, size = blocks.get_block_ids()[0], self._block_size
                first, end = synced // size, -(-(synced + num_external_tokens) // size)
                self._invalid.add(ids[self._rng.randrange(first, end)])
            local = self._loading.pop(request.request_id, None)
            if not num_external_tokens or local is None:
                return
            rng, size = self._rng, self._block_size
            (ids, *_), draw = blocks.get_block_ids(), rng.random()
            first, end = local // size, -(-(local + num_external_tokens) // size)
            failed_block = ids[rng.randrange(first, end)] if 0.15 <= draw < 0.35 and \
                self._failed_blocks else None
            self._started[request.request_id] = (rng.randint(1, 3), failed_block, draw < 0.15)
            self._receiving.add(request.request_id)

        def update_connector_output(self, connector_output):
            super().update_connector_output(connector_output)
            self._receiving -= set(connector_output.finished_recving or ())

        def build_connector_meta(self, scheduler_output):
            meta = FakeMetadata(self._started, self._sending, self._invalid)
            self._started, self._sending, self._invalid = {}, set(), set()
            return meta

        def request_finished(self, request, block_ids):
            # a request aborted during its load is freed when the load is reported (the
            # scheduler's finish_requests): no transfer of its own holds it back then
            delay = self._rng.random() < 0.3 and request.request_id not in self._receiving
            if delay:
                self._sending.add(request.request_id)
            return delay, None

        # the worker side: nothing runs here (FakeWorker answers for it)
        def start_load_kv(self, forward_context, **kwargs):
            pass

        def wait_for_layer_load(self, layer_name):
            pass

        def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
            pass

        def wait_for_save(self):
            pass

    class KvfuzzFakeHybridConnector(SupportsHMA, KvfuzzFakeConnector):
        """Over several groups: three loads in ten write some groups only (seeded apart)."""

        def __init__(self, vllm_config, role, kv_cache_config=None):
            super().__init__(vllm_config, role, kv_cache_config)
            extra = self._kv_transfer_config.kv_connector_extra_config
            self._groups_rng = random.Random(f"kvfuzz fake groups {extra.get('seed', 0)}")
            self._failed_blocks = False

        def get_loaded_kv_cache_group_ids(self, request):
            groups = tuple(range(len(self._kv_cache_config.kv_cache_groups)))
            if self._groups_rng.random() < 0.3:
                return tuple(g for g in groups if self._groups_rng.random() < 0.5)
            return groups

        def request_finished_all_groups(self, request, block_ids):
            return self.request_finished(request, block_ids[0])

    return {NAME: KvfuzzFakeConnector, HYBRID_NAME: KvfuzzFakeHybridConnector}


def __getattr__(name: str):
    if name in (NAME, HYBRID_NAME):
        globals().update(_build())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class FakeWorker:
    """The fake connector's worker: a load is received after the steps it takes (counting the
    step it started in), with its failure if it has one; a held-back free is sent at the next
    step. `loads`, `stores` and `failures` count the loads started, the frees held back and the
    loads that failed. With `aborts` > 0, after each step it aborts each request whose load
    is in flight with that probability (`finish_requests`, as a client's disconnect), drawn
    from its own stream seeded by `seed`; `aborted` counts them."""

    def __init__(self, seed: int = 0, aborts: float = 0.0):
        self.loads = self.stores = self.failures = self.aborted = self.sync_failures = 0
        self._rng, self._aborts = random.Random(f"kvfuzz fake worker {seed}"), aborts
        self.in_flight: dict[str, int] = {}
        self.sending: set[str] = set()

    def output(self, scheduler_output):
        from vllm.v1.outputs import KVConnectorOutput

        meta = scheduler_output.kv_connector_metadata
        if meta is None:
            return None
        self.loads += len(meta.loads)
        self.stores += len(meta.sending)
        self.in_flight.update(meta.loads)
        received = {rid for rid, (left, _, _) in self.in_flight.items() if left <= 1}
        invalid = ({self.in_flight[rid][1] for rid in received} | meta.invalid) - {None}
        failed = {rid for rid in received if self.in_flight[rid][2]}
        self.failures += len(invalid) + len(failed)
        self.sync_failures += len(meta.invalid)
        self.in_flight = {rid: (left - 1, *rest) for rid, (left, *rest) in
                          self.in_flight.items() if rid not in received}
        sent, self.sending = self.sending, set(meta.sending)
        return KVConnectorOutput(finished_sending=sent or None,
                                 finished_recving=received or None,
                                 invalid_block_ids=invalid, failed_recving=failed)

    def after(self, scheduler, requests) -> None:
        if not self._aborts:
            return
        from vllm.v1.request import RequestStatus

        # the load stays in flight here: the scheduler frees the request when it is received
        for rid in sorted(self.in_flight):
            if self._rng.random() < self._aborts and not scheduler.requests[rid].is_finished():
                scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
                self.aborted += 1
