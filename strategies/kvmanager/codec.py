"""Decoding and validation of "kvfuzz-kvmanager-trace/1" JSON; every problem raises
`FormatError` naming the source, the field and the value."""

from __future__ import annotations

import math
from dataclasses import fields

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import (FORMAT, KINDS, LATER_SETTINGS, Arrive, Evict, Op,
                                               Trace)

# Limits no legitimate trace reaches: they bound memory and time (each op compares the state of
# every block and every live request's table; a request's tokens are hashed block by block).
MAX_BLOCKS, MAX_OPS, MAX_BLOCK_SIZE, MAX_LEN, MAX_LIST = 2**11, 2**11, 64, 2**14, 2**10
MAX_LOOKAHEAD = 16  # draft tokens a step (vLLM's num_speculative_tokens is a handful)
MAX_PAD = MAX_LOOKAHEAD  # placeholder draft rows of a padded admission (as many)
TOKEN_MAX = 2**31 - 1
MAX_KEY, MAX_IMAGES = 256, 64  # a request's extra keys: a LoRA name, path or salt; its images


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
    ops = reader.ops(data.get("ops"), MAX_OPS)
    decoded = tuple(_op(reader, raw, f"ops[{i}]") for i, raw in enumerate(ops))
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
    # them with it on); "align" (judged in a reduced mode, fuzz/kvmanager/align.py) without
    # EAGLE or tokens in flight, which that mode leaves out.
    values["mamba_mode"] = mode = data.get("mamba_mode", "")
    reader.expect(mode in ("", "none", "all", "align"), "mamba_mode",
                  'expected "", "none", "all" or "align"', mode)
    reader.expect(not mode or not (window or local), "mamba_mode",
                  "expected no sliding-window or chunked-local group with a Mamba group", mode)
    reader.expect(mode in ("", "align") or not values["caching"], "mamba_mode",
                  'expected caching off with Mamba mode "none" or "all"', mode)
    reader.expect(mode != "align" or not (values["eagle"] or values["async_scheduling"]),
                  "mamba_mode", 'expected no EAGLE and no asynchronous scheduling with Mamba '
                  'mode "align" (its reduced checks leave them out)', mode)
    # Cross-attention: caching off (vLLM's cross-attention manager refuses lookups), and no
    # other second group.
    values["encoder_tokens"] = encoder = reader.integer(
        data.get("encoder_tokens", 0), "encoder_tokens", low=0, high=MAX_LEN)
    reader.expect(not encoder or not (window or local or mode or values["caching"]),
                  "encoder_tokens", "expected 0 with another second group or with caching on "
                  "(vLLM's cross-attention manager does not support caching)", encoder)
    # Zeroing: the second attention group in another precision than full attention's.
    reader.expect(not values["zeroing"] or window or local, "zeroing",
                  "expected false without a sliding-window or chunked-local group", True)
    values["dcp"] = _dcp(reader, data, values, window)
    values["hash_lookahead"] = _hash_lookahead(reader, data, values)
    values["eagle_groups"] = _eagle_groups(reader, data, values, window)
    values["prefill_lookahead"] = _prefill_lookahead(reader, data, values)
    values["mamba_checkpoint"] = _mamba_checkpoint(reader, data, values)
    values["mamba_speculative"] = speculative = reader.integer(
        data.get("mamba_speculative", 0), "mamba_speculative", low=0, high=MAX_LOOKAHEAD)
    reader.expect(not speculative or values["mamba_mode"] == "align", "mamba_speculative",
                  'expected 0 without a Mamba group in mode "align"', speculative)
    values["lookahead"] = reader.integer(data.get("lookahead", 0), "lookahead", low=0,
                                         high=MAX_LOOKAHEAD)
    values["retained"] = reader.integer(data.get("retained", 0), "retained", low=0, high=MAX_LEN)
    # Extra retained tokens belong to a sliding window.
    reader.expect(window or not values["retained"], "retained",
                  "expected 0 without a sliding window", values["retained"])
    values["hisparse"] = _hisparse(reader, data, values, window)
    values["hisparse_lag"] = _hisparse_lag(reader, data, values["hisparse"])
    _lone(reader, data, values, window)
    values["first_window"] = _first_window(reader, data, values, window)
    _full_last(reader, data, values, window)
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


def _hisparse(reader: FieldReader, data: dict, values: dict, window: int) -> int:
    """HiSparse's host blocks: its four groups alone, one block size, caching on, none of the
    settings its reduced checks leave out (`fuzz/kvmanager/hisparse.py`)."""
    host = reader.integer(data.get("hisparse", 0), "hisparse", low=0, high=MAX_BLOCKS)
    # a Mamba "align" group beside them with a hash block below the block (the "hisparse cow"
    # profile: fine-grained hits, the host's copy-on-write), both or neither
    cow = values["mamba_mode"] == "align" and bool(values["hash_block_size"])
    others = [name for name in ("local_chunk", "mamba_mode", "encoder_tokens", "zeroing", "dcp",
                                "hash_lookahead", "eagle_groups", "prefill_lookahead", "lookahead",
                                "eagle", "async_scheduling", "retained", "window_block_size",
                                "hash_block_size", "events", "report", "stats",
                                "mamba_checkpoint", "mamba_speculative")
              if values.get(name, data.get(name)) and
              not (cow and name in ("mamba_mode", "hash_block_size"))]
    beside = ["a sliding window"] if window else []
    beside += ["caching off"] if not values["caching"] else []
    beside += [", ".join(others)] if others else []
    reader.expect(not host or not beside, "hisparse",
                  f"expected 0 with {' and '.join(beside)} (HiSparse's groups alone, none of "
                  f"the settings its reduced checks leave out; a Mamba \"align\" group only "
                  f"with a hash block below the block)", host)
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
    models it over attention groups hashed per block (no Mamba, cross-attention or DCP)."""
    ahead = reader.integer(data.get("hash_lookahead", 0), "hash_lookahead", low=0,
                           high=MAX_LOOKAHEAD)
    reader.expect(not ahead or (values["caching"] and not values["eagle"]), "hash_lookahead",
                  "expected 0 with caching off or EAGLE (the scheduler clears use_eagle when "
                  "hashes look ahead)", ahead)
    reader.expect(not ahead or not (values["mamba_mode"] or values["encoder_tokens"] or
                                    values["dcp"]), "hash_lookahead",
                  "expected 0 with a Mamba or cross-attention group or DCP", ahead)
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
    chunk; modelled beside a window or alone, hashed per block (checked with the sizes)."""
    ahead = reader.integer(data.get("prefill_lookahead", 0), "prefill_lookahead", low=0,
                           high=MAX_LOOKAHEAD)
    reader.expect(not ahead or not (values["local_chunk"] or values["mamba_mode"] or
                                    values["encoder_tokens"] or values["dcp"]),
                  "prefill_lookahead",
                  "expected 0 with a chunked-local, Mamba or cross-attention group or DCP", ahead)
    return ahead


def _mamba_checkpoint(reader: FieldReader, data: dict, values: dict) -> int:
    """Mamba "align"'s prefill checkpoint block: 0 (none) or its alignment in tokens."""
    alignment = reader.integer(data.get("mamba_checkpoint", 0), "mamba_checkpoint", low=0,
                               high=MAX_LEN)
    reader.expect(not alignment or values["mamba_mode"] == "align", "mamba_checkpoint",
                  'expected 0 without a Mamba group in mode "align"', alignment)
    return alignment


def _sizes(reader: FieldReader, block_size: int, window: int, values: dict,
           retention: int | None) -> None:
    """The hybrid stream's block sizes: what vLLM's coordinators accept (the unitary one, one
    group, only hashes of its block size; the hybrid one, every group's block size a multiple
    of the hash block size, and a positive retention a multiple of the scheduler block size,
    the least common multiple of the groups')."""
    for name in ("window_block_size", "hash_block_size"):
        values[name] = reader.integer(values.get(name, 0), name, low=0, high=MAX_BLOCK_SIZE)
    swa, hashed = values["window_block_size"], values["hash_block_size"]
    reader.expect(window or not swa, "window_block_size",
                  "expected 0 without a sliding window", swa)
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
    reader.expect(not values["hash_lookahead"] or set(sizes) == {hashed or block_size},
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


def _op(reader: FieldReader, raw: object, where: str) -> Op:
    kind = reader.op_kind(raw, where, KINDS)
    values = {}
    for f in fields(kind):
        at = f"{where}.{f.name}"
        if kind is Arrive and f.name in ("no_cache_read", "embeds"):
            values[f.name] = reader.boolean(raw.get(f.name, False), at)
        elif kind is Arrive and f.name in ("lora", "lora_path", "salt"):
            values[f.name] = _key_text(reader, raw.get(f.name, ""), at)
        elif kind is Arrive and f.name == "images":
            values["images"] = _images(reader, raw.get("images", []), at)
        elif kind is Arrive and f.name == "tokens":
            values["tokens"] = reader.int_list(raw.get("tokens"), at, low=0, high=TOKEN_MAX,
                                               most=MAX_LEN)
            reader.expect(len(values["tokens"]) > 0, at, "expected at least one token", [])
        elif kind is Stream and f.name == "tokens":  # a streaming update's prompt (none: it
            # waits for one)
            values["tokens"] = reader.int_list(raw.get("tokens", []), at, low=0,
                                               high=TOKEN_MAX, most=MAX_LEN)
        elif kind is Stream and f.name == "discard":  # the token a stop discards (async)
            values["discard"] = reader.boolean(raw.get("discard", False), at)
        elif kind is Evict:
            values["block_ids"] = reader.int_list(raw.get("block_ids"), at, low=0, high=2**31,
                                                  most=MAX_LIST)
        elif f.name == "chunk":  # 0: a step that adopts a hit alone (or a caller's bug)
            values["chunk"] = reader.integer(raw.get("chunk"), at, low=0, high=MAX_LEN)
        elif f.name == "pad":  # spec-decode placeholder rows (vLLM's num_speculative_tokens)
            values["pad"] = reader.integer(raw.get("pad", 0), at, low=0, high=MAX_PAD)
        elif f.name in ("drafts", "rejected"):  # asynchronous draft tokens (at most k)
            values[f.name] = reader.integer(raw.get(f.name, 0), at, low=0, high=MAX_PAD)
        elif f.name in ("rows_in_flight", "again"):  # padded rows held to the output; a
            # refused prefill chunk made again after a preemption (asynchronous)
            values[f.name] = reader.boolean(raw.get(f.name, False), at)
        elif f.name == "defer":  # a free deferred past the pool (pop_blocks_for_free)
            values["defer"] = reader.boolean(raw.get("defer", False), at)
        elif f.name == "stale":  # a preempted request's token delivered late (asynchronous)
            values["stale"] = reader.boolean(raw.get("stale", False), at)
        elif f.name == "load":  # a connector's asynchronous load
            values["load"] = reader.boolean(raw.get("load", False), at)
        elif f.name in ("external", "reserve"):
            values[f.name] = reader.integer(raw.get(f.name, 0), at, low=0, high=MAX_LEN)
        elif f.name == "written":  # the groups a load writes, a bit each (-1: every group)
            values["written"] = reader.integer(raw.get("written", -1), at, low=-1, high=255)
        elif f.name == "valid":  # -1: the load was done; else its valid tokens
            values["valid"] = reader.integer(raw.get("valid", -1), at, low=-1, high=MAX_LEN)
        elif f.name == "token":
            values["token"] = reader.integer(raw.get("token"), at, low=0, high=TOKEN_MAX)
        else:  # rid
            values[f.name] = reader.integer(raw.get(f.name), at, low=0, high=2**31)
    op = kind(**values)
    if kind is Arrive:
        _check_keys(reader, op, where)
    return op


def _key_text(reader: FieldReader, value: object, at: str) -> str:
    """A LoRA name or path, or a cache salt: a string ("" for none), short (it is hashed into
    every block of the request)."""
    reader.expect(isinstance(value, str) and len(value) <= MAX_KEY, at,
                  f"expected a string of at most {MAX_KEY} characters", value)
    return value


def _images(reader: FieldReader, value: object, at: str) -> tuple:
    """A request's multimodal inputs: [identifier, offset, length] each."""
    reader.expect(isinstance(value, list), at, "expected a list of [identifier, offset, length]",
                  value)
    reader.at_most(len(value), at, MAX_IMAGES, "images")
    images = []
    for i, item in enumerate(value):
        where = f"{at}[{i}]"
        reader.expect(isinstance(item, list) and len(item) == 3, where,
                      "expected [identifier, offset, length]", item)
        ident = _key_text(reader, item[0], f"{where}[0]")
        reader.expect(ident != "", f"{where}[0]", "expected a non-empty identifier", ident)
        offset = reader.integer(item[1], f"{where}[1]", low=0, high=MAX_LEN)
        length = reader.integer(item[2], f"{where}[2]", low=1, high=MAX_LEN)
        images.append((ident, offset, length))
    return tuple(images)


def _check_keys(reader: FieldReader, op: Arrive, where: str) -> None:
    """What vLLM assumes of a request's extra keys: a LoRA adapter has a path (LoRARequest
    asserts it) and a path belongs to one; placeholders lie in the prompt, in order, apart."""
    reader.expect(bool(op.lora) == bool(op.lora_path), f"{where}.lora_path",
                  "expected a path with a LoRA name and none without", op.lora_path)
    end = 0
    for i, (_, offset, length) in enumerate(op.images):
        reader.expect(offset >= end, f"{where}.images[{i}]",
                      "expected images sorted by offset and not overlapping", list(op.images[i]))
        end = offset + length
        reader.expect(end <= len(op.tokens), f"{where}.images[{i}]",
                      f"expected within the prompt's {len(op.tokens)} tokens",
                      list(op.images[i]))


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
