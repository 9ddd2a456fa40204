"""The block hash function kvfuzz hands vLLM's request block hasher, and the same chain computed
without vLLM (the oracle's side). Standard library only.

vLLM calls its hash function on `(parent_hash, block_tokens, extra_keys)` for each full block,
and once on a seed string for the hash before the first block (`init_none_hash`). Any injective
function serves prefix caching, which only compares hashes; this one is SHA-256 over a canonical
encoding, cut to 8 bytes (a collision in a trace of a few hundred blocks: about 2^-48), and it
ignores the seed, so a run does not depend on PYTHONHASHSEED.
"""

from __future__ import annotations

import hashlib

NONE_HASH = hashlib.sha256(b"kvfuzz:none").digest()[:8]


def block_hash(value) -> bytes:
    if not isinstance(value, tuple):  # init_none_hash's seed
        return NONE_HASH
    parent, tokens, extra = value
    # Each block is hashed twice at least (vLLM's request and the oracle's chain) and shared
    # prefixes more: a block of plain token ids under no extra keys is hashed once (`_MEMO`,
    # bounded). Only exact ints as tokens: True == 1 and 1.0 == 1 as keys, not as text.
    plain = extra is None and type(parent) is bytes and type(tokens) is tuple and \
        set(map(type, tokens)) <= _INT
    if plain and (found := _MEMO.get((parent, tokens))) is not None:
        return found
    digest = _digest(parent, tokens, extra)
    if plain:
        if len(_MEMO) >= 1 << 16:
            _MEMO.clear()
        _MEMO[parent, tokens] = digest
    return digest


_MEMO: dict[tuple[bytes, tuple], bytes] = {}
_INT = frozenset((int,))


def _digest(parent, tokens, extra) -> bytes:
    # The extra keys as a set (sorted by their text): what identifies a block is which keys
    # apply to it, not the order vLLM lists them in (an equivalent reordering stays equal).
    # A bare digest is an earlier release's spelling of a prompt-embeds key (vLLM 0.29 keys a
    # block's embeddings untagged, 0.33 as ("prompt_embeds", digest)): read as the same key.
    if isinstance(extra, tuple) and any(isinstance(key, bytes) for key in extra):
        extra = tuple(("prompt_embeds", key) if isinstance(key, bytes) else key
                      for key in extra)
    if isinstance(extra, tuple) and all(isinstance(key, tuple) for key in extra):
        extra = tuple(sorted(extra, key=repr))
    data = b"%s|%s|%r" % (bytes(parent), ",".join(map(str, tokens)).encode(), extra)
    return hashlib.sha256(data).digest()[:8]


def chain(tokens, block_size: int) -> list[int]:
    """The hashes of every full block of `tokens`, as ints (the pool's keys decode to these)."""
    return chain_from(None, tokens, block_size)


def chain_from(parent: int | None, tokens, block_size: int, start: int = 0,
               extra_keys=None, lookahead: int = 0) -> list[int]:
    """The hashes of the full blocks of `tokens`, which follow a block whose hash is `parent`
    (None: they start the request) and start at token `start` of the request;
    `extra_keys(first, end)`: the extra keys of the request's tokens [first, end) (None: none
    for any block). `lookahead` (vLLM's `num_hash_lookahead_tokens`): a block's hash also
    covers that many tokens after it, so it is made only once they are in `tokens`: its extra
    keys are (the keys of the block and those tokens, *those tokens)."""
    hashes, previous = [], NONE_HASH if parent is None else parent.to_bytes(8, "big")
    for end in range(block_size, len(tokens) - lookahead + 1, block_size):
        first = start + end - block_size
        if lookahead:
            keys = (extra_keys(first, start + end + lookahead) if extra_keys else None,
                    *tokens[end:end + lookahead])
        else:
            keys = extra_keys(first, start + end) if extra_keys else None
        previous = block_hash((previous, tuple(tokens[end - block_size:end]), keys))
        hashes.append(int.from_bytes(previous, "big"))
    return hashes
