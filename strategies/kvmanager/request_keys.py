"""What a kvmanager trace's request carries besides its tokens that vLLM folds into its block
hashes (`trace.RequestKeys`, re-exported there). Standard library only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestKeys:
    """What a request carries besides its tokens that vLLM folds into its block hashes (the
    "extra keys" of `generate_block_hash_extra_keys`): a LoRA adapter (`lora` its name,
    `lora_path` where it is loaded from; "" none), a cache salt (`salt`; "" none), and its
    multimodal inputs, `images`: (identifier, offset, length) each, the placeholder tokens
    [offset, offset + length) of the prompt, sorted and not overlapping (as vLLM assumes)."""

    lora: str = ""
    lora_path: str = ""
    salt: str = ""
    images: tuple[tuple[str, int, int], ...] = ()
    # prompt embeddings: each prompt position's embedding (one float32 value, the arrival's
    # token); () none (the "prompt embeds" profile)
    embeds: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.lora or self.salt or self.images or self.embeds)


NO_KEYS = RequestKeys()
