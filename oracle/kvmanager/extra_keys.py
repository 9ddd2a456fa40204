"""A block's identity beyond its tokens: the extra keys vLLM 0.33.0 folds into a block's hash
(`kv_cache_utils.generate_block_hash_extra_keys`), and what the KV events publish of them
(`to_event_extra_keys`). Plain Python; read from the released source:

- a LoRA adapter: ("lora", name, path) on every block of the request (the path too, so a name
  pointed at another adapter does not reuse the old one's KV);
- a multimodal input: ("mm", identifier, offset - block start) on every block whose tokens
  overlap its placeholder range [offset, offset + length), in order;
- a cache salt: ("cache_salt", salt) on the request's first block only (the chain carries it
  to every later hash);
- prompt embeddings: ("prompt_embeds", SHA-256 of the block's embedding bytes) on every block
  of such a request (the "prompt embeds" profile), whose token ids are zeros.

Two requests share a cached block exactly when their tokens and the extra keys of every block up
to it are equal: the hash chains each block to its parent's. The order of the keys within a
block is vLLM's (LoRA, images, salt); kvfuzz's hash function reads them as a set.
"""

from __future__ import annotations

from kvfuzz.oracle.blockpool.events import embeds_digest
from kvfuzz.strategies.blockpool.events import Prompt
from kvfuzz.strategies.kvmanager.trace import RequestKeys


def block_extra_keys(keys: RequestKeys, start: int, end: int) -> tuple | None:
    """The extra keys of the request's block of tokens [start, end): None where none apply."""
    found = [("lora", keys.lora, keys.lora_path)] if keys.lora else []
    found += [("mm", ident, offset - start) for ident, offset, length in keys.images
              if offset < end and offset + length > start]
    found += [("cache_salt", keys.salt)] if keys.salt and start == 0 else []
    # prompt embeddings: a digest of the block's (every block of such a request: past the
    # prompt, of the embeddings there are, none)
    found += [("prompt_embeds", embeds_digest(keys.embeds, start, end))] if keys.embeds else []
    return tuple(found) or None


def prompt(hashes, tokens, keys: RequestKeys | None) -> Prompt:
    """The request as the pool reads it to publish its KV events: each event's extra keys are
    the LoRA name, (identifier, offset) of each image and the salt (`oracle.blockpool.events`)."""
    if not keys:
        return Prompt(hashes, tokens)
    return Prompt(hashes, tokens, salt=keys.salt or False,
                  images=tuple((offset, length) for _, offset, length in keys.images),
                  image_ids=tuple(ident for ident, _, _ in keys.images), lora=keys.lora,
                  embeds=keys.embeds)
