"""Decoding and validation of one op of a "kvfuzz-kvmanager-trace/1" file (`codec.from_json` reads
the rest); every problem raises `FormatError` naming the source, the field and the value."""

from __future__ import annotations

from dataclasses import fields

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.kvmanager.limits import (MAX_IMAGES, MAX_KEY, MAX_LEN, MAX_LIST, MAX_PAD,
                                                TOKEN_MAX)
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import KINDS, Arrive, Evict, Op


def read_op(reader: FieldReader, raw: object, where: str) -> Op:
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
        elif kind is Stream and f.name == "images":  # the update's, among its tokens
            values["images"] = _images(reader, raw.get("images", []), at)
        elif kind is Evict:
            values["block_ids"] = reader.int_list(raw.get("block_ids"), at, low=0, high=2**31,
                                                  most=MAX_LIST)
        elif f.name == "chunk":  # 0: a step that adopts a hit alone (or a caller's bug)
            values["chunk"] = reader.integer(raw.get("chunk"), at, low=0, high=MAX_LEN)
        elif f.name == "pad":  # spec-decode placeholder rows (vLLM's num_speculative_tokens)
            values["pad"] = reader.integer(raw.get("pad", 0), at, low=0, high=MAX_PAD)
        elif f.name in ("drafts", "rejected"):  # draft tokens (a placeholder's, a synchronous
            # schedule's; at most k)
            values[f.name] = reader.integer(raw.get(f.name, 0), at, low=0, high=MAX_PAD)
        elif f.name in ("rows_in_flight", "again", "refused"):  # padded rows held to the
            # output; a refused prefill chunk made again after a preemption (asynchronous); a
            # preemption made by the request's own refused allocation
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
        elif f.name == "max_hit":  # an admission's max_cache_hit_length (-1: none passed)
            values["max_hit"] = reader.integer(raw.get("max_hit", -1), at, low=-1, high=MAX_LEN)
        elif f.name == "valid":  # -1: the load was done; else its valid tokens
            values["valid"] = reader.integer(raw.get("valid", -1), at, low=-1, high=MAX_LEN)
        elif f.name == "inside_hit":  # a failed load's block inside its local hit
            values["inside_hit"] = reader.boolean(raw.get("inside_hit", False), at)
        elif f.name == "older":  # a finish's older step's tokens in flight (`remove_skipped`)
            values["older"] = reader.integer(raw.get("older", 0), at, low=0, high=MAX_LEN)
        elif f.name == "to":  # a running request's computed tokens cut (`cut`)
            values["to"] = reader.integer(raw.get("to"), at, low=0, high=MAX_LEN)
        elif f.name == "token":
            values["token"] = reader.integer(raw.get("token"), at, low=0, high=TOKEN_MAX)
        else:  # rid
            values[f.name] = reader.integer(raw.get(f.name), at, low=0, high=2**31)
    op = kind(**values)
    if kind is Arrive:
        _check_keys(reader, op, where)
    if kind is Stream:
        _check_images(reader, op, where)
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
    _check_images(reader, op, where)


def _check_images(reader: FieldReader, op, where: str) -> None:
    """An arrival's (or a streaming update's) placeholders lie in its tokens, in order, apart."""
    end = 0
    for i, (_, offset, length) in enumerate(op.images):
        reader.expect(offset >= end, f"{where}.images[{i}]",
                      "expected images sorted by offset and not overlapping", list(op.images[i]))
        end = offset + length
        reader.expect(end <= len(op.tokens), f"{where}.images[{i}]",
                      f"expected within the prompt's {len(op.tokens)} tokens",
                      list(op.images[i]))
