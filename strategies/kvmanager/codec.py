"""Decoding and validation of "kvfuzz-kvmanager-trace/1" JSON; every problem raises
`FormatError` naming the source, the field and the value."""

from __future__ import annotations

import math

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.kvmanager.connector_ops import OPS as CONNECTOR_OPS
from kvfuzz.strategies.kvmanager.limits import (  # noqa: F401 (read from here too)
    MAX_BLOCK_SIZE, MAX_BLOCKS, MAX_IMAGES, MAX_KEY, MAX_LEN, MAX_LIST, MAX_LOOKAHEAD, MAX_OPS,
    MAX_PAD, TOKEN_MAX)
from kvfuzz.strategies.kvmanager.op_codec import read_op
from kvfuzz.strategies.kvmanager.trace import FORMAT, LATER_SETTINGS, Trace


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, {"format", "blocks", "block_size", "window", "max_model_len",
                                   "retention", "full_sequence_must_fit",
                                   "max_in_flight_tokens", "watermark", "ops", "origin",
                                   "note", *LATER_SETTINGS})
    blocks = reader.integer(data.get("blocks"), "blocks", low=1, high=MAX_BLOCKS)
    block_size = reader.integer(data.get("block_size"), "block_size", low=1, high=MAX_BLOCK_SIZE)
    # vLLM's sliding-window group needs a window of 2 or more tokens (a window of 1 keeps no
    # block, which its hit search does not support); 0 means no sliding-window group.
    window = reader.integer(data.get("window"), "window", low=0, high=MAX_LEN)
    reader.expect(window != 1, "window", "expected 0 (no sliding-window group) or 2 or more",
                  window)
    max_model_len = reader.integer(data.get("max_model_len"), "max_model_len", low=1,
                                   high=MAX_LEN)
    retention = data.get("retention")
    if retention is not None:
        # vLLM refuses a positive interval without a sliding-window group, and one that is not a
        # multiple of the block size.
        reader.integer(retention, "retention", low=0, high=MAX_LEN)
        reader.expect(retention == 0 or (window and retention % block_size == 0), "retention",
                      "expected null, 0, or (with a sliding window) a multiple of block_size",
                      retention)
    fit = reader.boolean(data.get("full_sequence_must_fit", False), "full_sequence_must_fit")
    in_flight = data.get("max_in_flight_tokens")
    if in_flight is not None:
        reader.integer(in_flight, "max_in_flight_tokens", low=1, high=MAX_LEN)
    watermark = data.get("watermark", 0.0)
    reader.expect(type(watermark) in (int, float) and 0 <= watermark < 1, "watermark",
                  "expected a number in [0, 1) (vLLM's SchedulerConfig.watermark)", watermark)
    later = _later_settings(reader, data, window)
    _sizes(reader, block_size, window, later, retention)
    _mamba_shared_prefix(reader, block_size, later)
    ops = reader.ops(data.get("ops"), MAX_OPS)
    decoded = tuple(read_op(reader, raw, f"ops[{i}]") for i, raw in enumerate(ops))
    return Trace(blocks, block_size, window, max_model_len, decoded, retention, fit, in_flight,
                 float(watermark), **later, origin=reader.origin(data.get("origin")),
                 note=reader.note(data.get("note")))


def _later_settings(reader: FieldReader, data: dict, window: int) -> dict:
    values = {name: reader.boolean(data.get(name, default), name)
              for name, default in LATER_SETTINGS.items() if type(default) is bool}
    values |= {name: data.get(name, 0) for name in ("window_block_size", "hash_block_size")}
    values["local_chunk"] = local = reader.integer(data.get("local_chunk", 0), "local_chunk",
                                                   low=0, high=MAX_LEN)
    # One second group: a sliding window or a chunked-local one (vLLM asserts that EAGLE has
    # no chunked-local group).
    reader.expect(not (local and window), "local_chunk",
                  "expected 0 with a sliding window (one second group)", local)
    reader.expect(not (local and values["eagle"]), "eagle",
                  "expected false with a chunked-local group (vLLM asserts)", True)
    # A Mamba group: no other second group; in mode "none" or "all" caching off (vLLM refuses
    # them with it on); "align" (judged in a reduced mode, fuzz/kvmanager/align.py; tokens in
    # flight since 2026-12-06: align_async.py; EAGLE since 2026-12-06: align_eagle.py).
    values["mamba_mode"] = mode = data.get("mamba_mode", "")
    reader.expect(mode in ("", "none", "all", "align"), "mamba_mode",
                  'expected "", "none", "all" or "align"', mode)
    reader.expect(not mode or not (window or local), "mamba_mode",
                  "expected no sliding-window or chunked-local group with a Mamba group", mode)
    reader.expect(mode in ("", "align") or not values["caching"], "mamba_mode",
                  'expected caching off with Mamba mode "none" or "all"', mode)
    # EAGLE's drop beside an "align" group since 2026-12-06 (`align_eagle.py`), with a KV
    # connector's ops since 2026-12-07 (`align_external_eagle.py`), with multi-module MTP's
    # held-back tokens there too since 2026-12-07 (`align_external_mtp.py`; k up to the hash
    # unit, as without a connector: `_prefill_lookahead`)
    # Cross-attention: caching off (vLLM's cross-attention manager refuses lookups), and no
    # other second group.
    values["encoder_tokens"] = encoder = reader.integer(
        data.get("encoder_tokens", 0), "encoder_tokens", low=0, high=MAX_LEN)
    reader.expect(not encoder or not (window or local or mode or values["caching"]),
                  "encoder_tokens", "expected 0 with another second group or with caching on "
                  "(vLLM's cross-attention manager does not support caching)", encoder)
    # Zeroing: the second attention group in another precision than full attention's; or,
    # since 2026-12-08, a Mamba group in mode "none" or "all" (its layers turn zeroing on:
    # full attention's records compared, the "mamba plain connector" profile)
    reader.expect(not values["zeroing"] or window or local or mode in ("none", "all"),
                  "zeroing", 'expected false without a sliding-window, chunked-local or Mamba '
                  '("none" or "all") group', True)
    values["dcp"] = _dcp(reader, data, values, window)
    values["hash_lookahead"] = _hash_lookahead(reader, data, values)
    values["eagle_groups"] = _eagle_groups(reader, data, values, window)
    values["prefill_lookahead"] = _prefill_lookahead(reader, data, values)
    values["mamba_checkpoint"] = _mamba_checkpoint(reader, data, values)
    values["mamba_speculative"] = speculative = reader.integer(
        data.get("mamba_speculative", 0), "mamba_speculative", low=0, high=MAX_LOOKAHEAD)
    # (in mode "none" or "all" counted by the full oracle since 2026-12-08: its scratch blocks
    # on every allocation, `oracle/kvmanager/model.py`)
    reader.expect(not speculative or values["mamba_mode"], "mamba_speculative",
                  "expected 0 without a Mamba group", speculative)
    # (draft tokens in flight beside the group: judged since 2026-12-06, `align_async.py`)
    values["lookahead"] = reader.integer(data.get("lookahead", 0), "lookahead", low=0,
                                         high=MAX_LOOKAHEAD)
    # a pipeline's steps of a request in flight (vLLM's V2 runner: its stages, at most four)
    values["steps_in_flight"] = steps = reader.integer(
        data.get("steps_in_flight", 1), "steps_in_flight", low=1, high=4)
    reader.expect(steps == 1 or values["async_scheduling"], "steps_in_flight",
                  "expected 1 without asynchronous scheduling", steps)
    values["retained"] = reader.integer(data.get("retained", 0), "retained", low=0, high=MAX_LEN)
    # Extra retained tokens belong to a sliding window.
    reader.expect(window or not values["retained"], "retained",
                  "expected 0 without a sliding window", values["retained"])
    values["hisparse"] = _hisparse(reader, data, values, window)
    values["hisparse_lag"] = _hisparse_lag(reader, data, values["hisparse"])
    _lone(reader, data, values, window)
    values["first_window"] = _first_window(reader, data, values, window)
    _full_last(reader, data, values, window)
    # (KV events and stats beside a Mamba "align" group, hits reported and a KV connector's
    # ops included: judged since 2026-12-07, `fuzz/kvmanager/align_events.py`,
    # `align_reported.py`)
    reader.expect(values["caching"] or not (values["report"] or values["eagle"]), "caching",
                  "expected true with reported hits or EAGLE (they are about prefix hits)",
                  False)
    return values


def _lone(reader: FieldReader, data: dict, values: dict, window: int) -> None:
    """A lone sliding window: a window to be alone, and none of the settings that name another
    group or that the oracle does not model for it (vLLM's unitary coordinator hashes per
    block: no hash block of its own)."""
    others = [name for name in ("local_chunk", "mamba_mode", "encoder_tokens", "zeroing", "dcp",
                                "hash_lookahead", "eagle_groups", "prefill_lookahead",
                                "hisparse", "window_block_size", "hash_block_size")
              if values.get(name, data.get(name))]
    reader.expect(not values["lone"] or (window and not others), "lone",
                  f"expected false without a sliding window or with {', '.join(others)} (a "
                  f"lone window's group is the only one)", values["lone"])


def _first_window(reader: FieldReader, data: dict, values: dict, window: int) -> int:
    """Two sliding windows: group 0 a window of another size than group 1's, and none of the
    settings that name another group or that the oracle does not model for it."""
    first = reader.integer(data.get("first_window", 0), "first_window", low=0, high=MAX_LEN)
    others = [name for name in ("local_chunk", "mamba_mode", "encoder_tokens", "zeroing", "dcp",
                                "hash_lookahead", "eagle_groups", "prefill_lookahead",
                                "hisparse", "lone")
              if values.get(name, data.get(name))]
    reader.expect(not first or (window and window != first and not others), "first_window",
                  f"expected 0 without a sliding window of another size or with "
                  f"{', '.join(others) or 'it'} (two windows stand alone)", first)
    return first


def _full_last(reader: FieldReader, data: dict, values: dict, window: int) -> None:
    """Full attention's group last: behind a Mamba group in mode "none" or "all" or a
    cross-attention group (caching off, so no hit, event or offload names a group), or a Mamba
    group in mode "align" (its reduced checks read the pool's entries, offers and answers by
    the trace's group ids: `fuzz/kvmanager/align_order.py`), and none of the settings that
    name a group by its index."""
    others = [name for name in ("eagle_groups", "dcp", "hisparse", "lone", "first_window",
                                "zeroing", "hash_lookahead", "prefill_lookahead")
              if values.get(name, data.get(name))]
    second = values["mamba_mode"] in ("none", "all", "align") or values["encoder_tokens"]
    reader.expect(not values["full_last"] or (second and not window and not others),
                  "full_last", f"expected false without a Mamba or cross-attention group or "
                  f"with {', '.join(others) or 'a sliding window'}", values["full_last"])


def _connector_ops(raw_ops) -> list[str]:
    """The names of the KV connector's ops among a file's ops (as written, before decoding)."""
    return [op.get("op") for op in raw_ops if isinstance(op, dict)
            and op.get("op") in CONNECTOR_OPS]


def _hisparse(reader: FieldReader, data: dict, values: dict, window: int) -> int:
    """HiSparse's host blocks: its four groups alone, one block size, caching on, none of the
    settings its reduced checks leave out (`fuzz/kvmanager/hisparse.py`)."""
    host = reader.integer(data.get("hisparse", 0), "hisparse", low=0, high=MAX_BLOCKS)
    # a Mamba "align" group beside them with a hash block below the block (the "hisparse cow"
    # profile: fine-grained hits, the host's copy-on-write), both or neither; its prefill
    # checkpoint block and speculative blocks too (judged as in the "align" mode)
    cow = values["mamba_mode"] == "align" and bool(values["hash_block_size"])
    # lookahead slots (speculative decoding's draft tokens, since 2026-12-08: each attention
    # group's table cdiv(slots, b) long, `hisparse_checks.table_problems`) and EAGLE's drop
    # (`use_eagle`, every group flagged: the hit's exact length with it,
    # `HostCopies.hit_length_problems`), but neither beside a second connector's ops (the
    # slots of a load and the connector's lookup are not modelled there) and EAGLE not beside
    # the Mamba group (its checkpoint and hit under the drop are not modelled here)
    raw_ops = data.get("ops") if isinstance(data.get("ops"), list) else []
    speculative = [f"{name} with a connector's ops" for name in ("lookahead", "eagle")
                   if values[name] and _connector_ops(raw_ops)]
    speculative += ["eagle beside the Mamba group"] if values["eagle"] and cow else []
    others = speculative + [
        name for name in ("local_chunk", "mamba_mode", "encoder_tokens", "zeroing", "dcp",
                          "hash_lookahead", "eagle_groups", "prefill_lookahead",
                          "async_scheduling", "retained", "window_block_size",
                          "hash_block_size", "events", "report", "stats", "mamba_checkpoint",
                          "mamba_speculative")
        if values.get(name, data.get(name)) and
        not (cow and name in ("mamba_mode", "hash_block_size", "mamba_checkpoint",
                              "mamba_speculative"))]
    beside = ["a sliding window"] if window else []
    beside += ["caching off"] if not values["caching"] else []
    beside += [", ".join(others)] if others else []
    reader.expect(not host or not beside, "hisparse",
                  f"expected 0 with {' and '.join(beside)} (HiSparse's groups alone, none of "
                  f"the settings its reduced checks leave out; a Mamba \"align\" group, and its "
                  f"checkpoint and speculative blocks, only with a hash block below the "
                  f"block)", host)
    return host


def _hisparse_lag(reader: FieldReader, data: dict, host: int) -> tuple[int, ...]:
    """HiSparse's worker reporting late (`strategies/kvmanager/hisparse_lag.py`): empty, or
    [most ops late 1 to 16, ranks 1 to 4, a seed], with HiSparse's groups only."""
    lag = reader.int_list(data.get("hisparse_lag", []), "hisparse_lag", low=0, high=2**31 - 1,
                          most=3)
    reader.expect(not lag or (len(lag) == 3 and 1 <= lag[0] <= 16 and 1 <= lag[1] <= 4),
                  "hisparse_lag", "expected [] or [most ops late 1 to 16, ranks 1 to 4, seed]",
                  list(lag))
    reader.expect(not lag or host, "hisparse_lag", "expected [] without HiSparse's host pool",
                  list(lag))
    return lag


def _dcp(reader: FieldReader, data: dict, values: dict, window: int) -> int:
    """Decode context parallelism: 0 (off) or 2 to 8 ranks, one full-attention group only (the
    oracle models the unitary coordinator's view: blocks of block_size, hashed per block);
    block_size's divisibility is checked with the sizes."""
    dcp = reader.integer(data.get("dcp", 0), "dcp", low=0, high=8)
    reader.expect(dcp != 1, "dcp", "expected 0 (off) or 2 to 8 ranks", dcp)
    reader.expect(not dcp or not (window or values["local_chunk"] or values["mamba_mode"] or
                                  values["encoder_tokens"]), "dcp",
                  "expected 0 with a second group (one full-attention group under DCP)", dcp)
    return dcp


def _hash_lookahead(reader: FieldReader, data: dict, values: dict) -> int:
    """Lookahead hashing: 0 (off) or the tokens past a block its hash covers. vLLM's config sets
    it only with prefix caching, and the scheduler then passes `use_eagle` false; the oracle
    models it over attention groups hashed per block (no cross-attention or DCP), and the
    reduced mode beside a Mamba group in mode "align" (`fuzz/kvmanager/align.py`)."""
    ahead = reader.integer(data.get("hash_lookahead", 0), "hash_lookahead", low=0,
                           high=MAX_LOOKAHEAD)
    reader.expect(not ahead or (values["caching"] and not values["eagle"]), "hash_lookahead",
                  "expected 0 with caching off or EAGLE (the scheduler clears use_eagle when "
                  "hashes look ahead)", ahead)
    reader.expect(not ahead or not (values["mamba_mode"] not in ("", "align") or
                                    values["encoder_tokens"] or values["dcp"]), "hash_lookahead",
                  'expected 0 with a Mamba group in mode "none" or "all", a cross-attention '
                  'group or DCP', ahead)
    # vLLM keeps the legacy hashes with a KV connector (`num_hash_lookahead_tokens` is 0 with a
    # `kv_transfer_config`): no connector's ops, lookup or loads under lookahead hashing
    connector = _connector_ops(data.get("ops", ()))
    reader.expect(not ahead or not connector, "hash_lookahead",
                  f"expected 0 with a KV connector's ops ({connector[0] if connector else ''}: "
                  f"vLLM keeps the legacy hashes with a connector)", ahead)
    return ahead


def _eagle_groups(reader: FieldReader, data: dict, values: dict, window: int) -> tuple:
    """The groups flagged `is_eagle_group`: distinct, sorted indices of the groups there are
    (0: full attention, 1: a sliding window); modelled beside a window or alone (not beside a
    chunked-local, Mamba or cross-attention group)."""
    flagged = reader.int_list(data.get("eagle_groups", []), "eagle_groups", low=0,
                              high=1 if window else 0, most=2)
    reader.expect(list(flagged) == sorted(set(flagged)), "eagle_groups",
                  "expected distinct group indices in order", list(flagged))
    reader.expect(not flagged or not (values["local_chunk"] or values["mamba_mode"] or
                                      values["encoder_tokens"]), "eagle_groups",
                  "expected [] with a chunked-local, Mamba or cross-attention group",
                  list(flagged))
    return flagged


def _prefill_lookahead(reader: FieldReader, data: dict, values: dict) -> int:
    """Multi-token prediction's prefill lookahead: 0 (off) or the drafter's tokens past a
    chunk; modelled beside a window or alone, hashed per block (checked with the sizes), and
    beside a Mamba group in mode "align" (without EAGLE no group holds tokens back: the hybrid
    coordinator's `get_num_cacheable_tokens` reads it for EAGLE groups only; with EAGLE's drop
    k - 1 are, `fuzz/kvmanager/align_eagle.py`, for k up to the hash unit)."""
    ahead = reader.integer(data.get("prefill_lookahead", 0), "prefill_lookahead", low=0,
                           high=MAX_LOOKAHEAD)
    reader.expect(not ahead or not (values["local_chunk"] or
                                    values["mamba_mode"] not in ("", "align") or
                                    values["encoder_tokens"] or values["dcp"]),
                  "prefill_lookahead",
                  'expected 0 with a chunked-local, cross-attention or Mamba group in mode '
                  '"none" or "all", or DCP', ahead)
    # (beside an "align" group with EAGLE's drop, k >= 2 holds k - 1 computed tokens back from
    # caching in both groups, modelled: `align_eagle.py`; with k above the hash unit, shapes
    # where vLLM's scheduler stalls and its manager asserts on a prompt run past its tail
    # boundary by a checkpoint chunk: refused, docs/upstream-vllm.md)
    hashed = values["hash_block_size"] or data.get("block_size")  # (both checked later)
    hashed = hashed if isinstance(hashed, int) else 1
    reader.expect(ahead <= max(1, hashed) or not (values["mamba_mode"] == "align" and
                                                 values["eagle"]),
                  "prefill_lookahead", 'expected at most the hash unit with EAGLE beside a Mamba '
                  'group in mode "align" (a prompt run past its tail boundary then: not '
                  'modelled)', ahead)
    return ahead


def _mamba_checkpoint(reader: FieldReader, data: dict, values: dict) -> int:
    """Mamba "align"'s prefill checkpoint block: 0 (none) or its alignment in tokens."""
    alignment = reader.integer(data.get("mamba_checkpoint", 0), "mamba_checkpoint", low=0,
                               high=MAX_LEN)
    reader.expect(not alignment or values["mamba_mode"] == "align", "mamba_checkpoint",
                  'expected 0 without a Mamba group in mode "align"', alignment)
    return alignment


def _mamba_shared_prefix(reader: FieldReader, block_size: int, values: dict) -> None:
    """`enable_mamba_shared_prefix_checkpoint` (`fuzz/kvmanager/align_shared_prefix.py`): set
    only where vLLM 0.33.0's manager turns it on (kv_cache_manager.py 188-193: an EAGLE group,
    partial hash hits, no MTP tokens re-prefilled), so a trace never asks for a setting the
    manager silently drops: a Mamba "align" group hashed per unit below its block (no DCP),
    caching, EAGLE's drop, at most 1 prefill lookahead token."""
    hashed = values["hash_block_size"] or block_size
    reader.expect(not values["mamba_shared_prefix"] or (
        values["mamba_mode"] == "align" and values["caching"] and values["eagle"] and
        hashed < block_size and not values["dcp"] and values["prefill_lookahead"] <= 1),
        "mamba_shared_prefix", 'expected false without a Mamba group in mode "align" hashed '
        'below its block size, caching, EAGLE and at most 1 prefill lookahead token, or with '
        'DCP (vLLM turns it off there)', True)


def _sizes(reader: FieldReader, block_size: int, window: int, values: dict,
           retention: int | None) -> None:
    """The hybrid stream's block sizes: what vLLM's coordinators accept (the unitary one, one
    group, only hashes of its block size; the hybrid one, every group's block size a multiple
    of the hash block size, and a positive retention a multiple of the scheduler block size,
    the least common multiple of the groups')."""
    # (a Mamba group's block may be as long as the model: `window_block_size` below)
    plain_mamba = values["mamba_mode"] in ("none", "all")
    for name in ("window_block_size", "hash_block_size"):
        high = MAX_LEN if plain_mamba and name == "window_block_size" else MAX_BLOCK_SIZE
        values[name] = reader.integer(values.get(name, 0), name, low=0, high=high)
    swa, hashed = values["window_block_size"], values["hash_block_size"]
    # (the second group's block size: a sliding window's, or since 2026-12-08 a Mamba group's
    # in mode "none" or "all", whose block vLLM's config makes the model's length with caching
    # off: `MambaModelConfig.verify_and_update_config`)
    reader.expect(window or values["mamba_mode"] in ("none", "all") or not swa,
                  "window_block_size", 'expected 0 without a sliding window or a Mamba group '
                  'in mode "none" or "all"', swa)
    sizes = (block_size, swa or block_size) if (window or values["local_chunk"] or
                                                values["mamba_mode"] or values["encoder_tokens"]
                                                ) and not values["lone"] else (block_size,)
    reader.expect(not hashed or all(size % hashed == 0 for size in sizes), "hash_block_size",
                  f"expected 0 or a divisor of every group's block size {sizes}", hashed)
    reader.expect(len(sizes) > 1 or hashed in (0, block_size), "hash_block_size",
                  "expected 0 or block_size with one group (vLLM's unitary coordinator)",
                  hashed)
    reader.expect(not values["dcp"] or block_size % values["dcp"] == 0, "dcp",
                  f"expected a divisor of block_size {block_size} (each rank's share of a "
                  f"block)", values["dcp"])
    # (the reduced mode beside a Mamba "align" group hashes per hash block, lookahead or not)
    reader.expect(not values["hash_lookahead"] or values["mamba_mode"] == "align" or
                  set(sizes) == {hashed or block_size},
                  "hash_lookahead", f"expected 0 unless every group's blocks {sizes} are hashed "
                  f"per block (the oracle's lookahead hashing)", values["hash_lookahead"])
    scheduler = math.lcm(*sizes)
    mtp = values["prefill_lookahead"]
    # (MTP holds computed tokens back from caching, in tokens: any hash block size vLLM takes;
    # groups of different block sizes are not modelled with it)
    reader.expect(not mtp or len(set(sizes)) == 1, "prefill_lookahead",
                  f"expected 0 unless every group has one block size (got {sizes}; the "
                  f"oracle's MTP)", mtp)
    # vLLM's coordinator raises ValueError with EAGLE groups and caching when the scheduler
    # block is below the prefill lookahead (the dropped tail must hold the drafter's tokens)
    reader.expect(not (mtp > scheduler and values["caching"] and
                       (values["eagle"] or values["eagle_groups"])), "prefill_lookahead",
                  f"expected at most the scheduler block size {scheduler} with EAGLE and "
                  f"caching (vLLM refuses it)", mtp)
    reader.expect(not retention or retention % scheduler == 0, "retention",
                  f"expected a multiple of the scheduler block size {scheduler}", retention)


def worst_input() -> dict:
    """The most a file under 1 MB can ask (replayed under a 1 GB bound by the memory test): one
    request decoding to the op limit, each op reading every block and hashing one, with the
    KV events and stats observed and the most draft slots."""
    return {"format": FORMAT, "blocks": MAX_BLOCKS, "block_size": 1, "window": 2,
            "max_model_len": MAX_LEN, "events": True, "stats": True,
            "lookahead": MAX_LOOKAHEAD, "ops": [
                {"op": "arrive", "rid": 1, "tokens": list(range(MAX_LEN // 2))},
                {"op": "schedule", "rid": 1, "chunk": MAX_LEN},
                *[{"op": "decode", "rid": 1, "token": 7}] * (MAX_OPS - 2)]}
