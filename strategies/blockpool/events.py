"""KV-cache events as plain data: what vLLM's pool publishes for consumers outside it (a
router's prefix index, a gateway), `vllm.distributed.kv_events`' `BlockStored`, `BlockRemoved`
and `AllBlocksCleared`, with hashes as ints; and what a pool reads of a request to cache its
blocks and say so (`Prompt`). The oracle says which events a call publishes and a driver
translates the implementation's; they share these types, never logic. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass

SALT = "kvfuzz-salt"  # the cache salt of a request that has one (`Prompt.salt`)
IMAGE = "kvfuzz-image-{}"  # the identifier of a request's multimodal input i (`Prompt.images`)


@dataclass(frozen=True)
class Prompt:
    """A request as the pool reads it: its hashes, one per hash block of tokens (vLLM's
    `block_hashes`), its tokens, its cache salt (False: none; True: `SALT`; or the salt), and
    its multimodal inputs ((token offset, length), in order), with their identifiers
    (`image_ids`; none given: `IMAGE` of each one's place), and the name of its LoRA adapter
    (`lora`; "" none)."""

    hashes: tuple[int, ...]
    tokens: tuple[int, ...]
    salt: bool | str = False
    images: tuple[tuple[int, int], ...] = ()
    image_ids: tuple[str, ...] = ()
    lora: str = ""
    # prompt embeddings: each prompt position's value (float32; () none): each block's digest
    # of them is an extra key
    embeds: tuple[int, ...] = ()


@dataclass(frozen=True)
class Stored:
    """Blocks entered the prefix cache: their hashes in order, the hash of the block before the
    first (None: they start the request), the tokens they cover, tokens per block, the KV-cache
    group, each block's extra hash keys (cache salt, LoRA, ...; None: none at all), the tokens
    after each block its hash covers (lookahead; None: none), and the manager's annotation of
    the group (its kind and sliding window; None from a bare pool)."""

    hashes: tuple[int, ...]
    parent: int | None
    tokens: tuple[int, ...]
    block_size: int
    group: int | None
    extra_keys: tuple | None = None
    lookahead: tuple | None = None
    kind: str | None = None
    window: int | None = None


@dataclass(frozen=True)
class Removed:
    """Entries left the prefix cache (one event per entry in vLLM 0.33.0)."""

    hashes: tuple[int, ...]
    group: int | None


@dataclass(frozen=True)
class Cleared:
    """The whole prefix cache was reset."""


Event = Stored | Removed | Cleared
