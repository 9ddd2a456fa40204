"""The "mamba connector" profile (`kvmanager/5[mamba connector]`, a stream of its own with a share
of the mix, `streams.py`; `--profile "mamba connector"` alone): a KV connector's external
tokens beside a Mamba group in "align" mode with prefix caching, judged in the reduced mode
(`fuzz/kvmanager/align_external.py`). Standard library only.

The "mamba align" profile's layout and engine settings (`hybrid.build_mamba_align`: full
attention beside a Mamba group of one block size, 2 to 8, hashed per block or per fewer tokens,
a prefill checkpoint block, speculative Mamba blocks), and the "connector" profile's requests
(`connector._Connected`: most admitted with external tokens, half of them loaded
asynchronously, some with blocks reserved). What vLLM 0.33.0 allows there:

- every asynchronous load is done or failed whole (`Loaded.valid` -1 or 0): with two groups
  the scheduler refuses block-level failures (`Scheduler._handle_invalid_blocks` raises:
  "not supported for models with multiple KV cache groups"); a connector reports the
  request in `failed_recving`, which sets `num_computed_tokens` to 0, and the request is freed
  and admitted again;
- Mamba layers turn `needs_kv_cache_zeroing` on (`KVCacheConfig.needs_kv_cache_zeroing`),
  so an asynchronous load names the groups it writes (`Connect.written`: every group, full
  attention's, the Mamba group's or none, a quarter of the loads not every group's);
- no spec-decode padding (the "mamba align" profile's traces have none); KV events and stats
  in 40% since 2026-12-07 (`align_observed.connector_observed`, after EAGLE's), and in half
  of those hits reported (`report`, `align_observed.connector_reported`, the last draw, since
  later that day);
- EAGLE's last-block drop (`use_eagle`: vLLM's legacy hashes with a connector, its drop on)
  in a quarter of the traces (`mamba_eagle.drawn`, drawn after every other draw, since
  2026-12-07): `fuzz/kvmanager/align_external_eagle.py`; multi-module MTP's prefill
  lookahead k of 2 to min(4, hash unit) in half of those hashed per 2 tokens or more without the
  shared-prefix checkpoint (`mamba_eagle.mtp`, after the above, since 2026-12-07):
  `fuzz/kvmanager/align_external_mtp.py`;
- a one-token prompt's load as drawn (since 2026-12-07; no new draw), and after its whole
  load, 0 computed tokens and its blocks held, the connector asked again
  (`connector._Connected.reconnects`: a `connect` again, a load or plain, or the `schedule`):
  `fuzz/kvmanager/align_external_single.py`;
- every finish is preceded by the scheduler's `remove_skipped_blocks` of the request (with a
  connector, `_connector_finished` makes it at each finish, before `request_finished` reads
  the table): a post-pass (`_finished`) puts a `remove_skipped` before each `finish`, so the
  ops drawn are those drawn without it;
- asynchronous loads only (the connector admissions the generator drew synchronous: half of
  them loads, half plain admissions through the connector, external 0). A synchronous load
  beside a Mamba "align" group is not in the profile: vLLM 0.33.0 counts one Mamba block too
  few for it (`MambaManager.get_num_blocks_to_allocate` caps the align group's count at one
  state block, its checkpoint and speculative blocks, while `allocate_external_computed_blocks`
  takes the external state's block and `allocate_new_blocks` the step's own), so an
  admission the count lets through at a pool one block short raises in `get_new_blocks`
  ("Cannot get N free blocks"), its external block leaked. `SYNC` (not a profile) keeps them
  (docs/upstream-vllm.md, 'A KV connector beside a Mamba "align" group').
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import align_observed, connector, hybrid, mamba_eagle
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded
from kvfuzz.strategies.kvmanager.trace import Finish, RemoveSkipped, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "mamba connector"


def build(rng: random.Random, num_ops: int, synchronous: bool = False) -> Trace:
    # the "mamba align" layout and settings, its ops replaced by the connector's requests
    layout = hybrid.build_mamba_align(rng, 1)
    size = layout.block_size
    gen = _Loads(rng, size, layout.max_model_len)
    gen.synchronous = synchronous
    gen.reconnects = not synchronous  # (after a one-token prompt's whole load: none in `SYNC`)
    while len(gen.ops) < num_ops:
        gen.step()
    ops = _finished(tuple(_resolved(op, rng) for op in gen.ops[:num_ops]))
    note = f"profile {PROFILE}" + (", synchronous loads" if synchronous else "")
    trace = replace(layout, ops=ops, note=note)
    # EAGLE's drop in a share (since 2026-12-07), drawn after every other draw: the other
    # traces keep their bytes; then KV events and stats in a share (since 2026-12-07), drawn last
    trace = trace if synchronous else mamba_eagle.drawn(rng, trace)
    trace = align_observed.connector_observed(rng, trace)
    # multi-module MTP's held-back tokens in a share of the EAGLE traces (since 2026-12-07),
    # drawn after all the above, only for those: every other trace keeps its bytes; then hits
    # reported in a share of the observing traces, drawn last, only for those
    trace = mamba_eagle.mtp(rng, trace)
    return align_observed.connector_reported(rng, trace)


def build_sync(rng: random.Random, num_ops: int) -> Trace:
    return build(rng, num_ops, synchronous=True)


def _finished(ops: tuple) -> tuple:
    """A `remove_skipped` before each `finish`, as `_connector_finished` calls it at every
    finish with a connector (no draw: the other ops stay as drawn)."""
    out: list = []
    for op in ops:
        if isinstance(op, Finish):
            out.append(RemoveSkipped(op.rid))
        out.append(op)
    return tuple(out)


def _resolved(op, rng: random.Random):
    """A failed load is the request's whole (two groups); a quarter of the loads write some
    groups only (bit 0 full attention, bit 1 the Mamba group)."""
    if isinstance(op, Loaded) and op.valid > 0:
        return replace(op, valid=0)
    if isinstance(op, Connect) and op.load and rng.random() < 0.25:
        return replace(op, written=rng.choice((0, 1, 2)))
    return op


class _Loads(connector._Connected):
    """The connector's requests; outside `SYNC` a synchronous admission with external tokens
    drawn is a load or (half) a plain admission through the connector (external 0)."""

    synchronous = False

    def arrive(self) -> None:
        super().arrive()
        op = self.ops[-1]
        if not isinstance(op, Connect):
            return
        if op.rid in self.single:
            # a one-token prompt: a load drawn is kept (no draw: a trace with none keeps its
            # ops), a synchronous admission plain (the connector counts all but its last
            # token); `SYNC` as before, plain
            if self.synchronous or not op.load:
                self.ops[-1] = replace(op, load=False, external=0, reserve=0)
                if op.load:
                    self.loading.remove(op.rid)
            return
        if self.synchronous or op.load:
            return
        if self.rng.random() < 0.5:
            self.ops[-1] = replace(op, load=True)
            self.loading.append(op.rid)
        else:
            self.ops[-1] = replace(op, external=0)

    def loaded(self) -> None:
        super().loaded()
        op = self.ops[-1]
        if isinstance(op, Connect) and not op.load and op.external:
            # the connector asked again after a one-token prompt's whole load, answering no
            # load: nothing it may load synchronously (all but the last token: none), plain
            self.ops[-1] = replace(op, external=0)


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[mamba connector]", build, num_ops=200, max_fuzz_ops=200)
# Synchronous loads as the connector profile draws them: not a profile, vLLM 0.33.0 fails it
# (the module's docstring), kept for its test and for a release that counts the block
SYNC = TraceGenerator("kvmanager/5[mamba connector, synchronous]", build_sync, num_ops=200,
                      max_fuzz_ops=200)
