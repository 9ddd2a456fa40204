"""What the kvmanager guard (`guard.py`) reads of an engine's request besides its tokens: its
extra hash keys (LoRA adapter, cache salt) and a prompt given as embeddings, as the trace's
`arrive` holds them, or None where the trace cannot hold them (the guard then refuses)."""

from __future__ import annotations


def extra_keys(request) -> dict | None:
    """The request's LoRA adapter and cache salt as `arrive` fields (none: {}), or None where
    the trace cannot hold them (not strings, too long, a LoRA adapter without a path)."""
    from kvfuzz.strategies.kvmanager.codec import MAX_KEY

    keys, lora = {}, getattr(request, "lora_request", None)
    if lora is not None:
        keys = {"lora": getattr(lora, "lora_name", None), "lora_path": getattr(lora, "lora_path",
                                                                               None)}
    salt = getattr(request, "cache_salt", None)
    if salt is not None and salt != "":  # (vLLM hashes an empty salt as none)
        keys["salt"] = salt
    if not all(isinstance(value, str) and 0 < len(value) <= MAX_KEY for value in keys.values()):
        return None
    return keys


def embedding_values(request) -> list[int] | None:
    """A prompt given as embeddings (`prompt_embeds`, no token ids), as the trace's tokens: one
    float value a position, integral, in 0..2^24 (float32 holds it exactly); [] for a prompt of
    token ids; None for embeddings the trace cannot hold (wider, other values, mixed)."""
    embeds = getattr(request, "prompt_embeds", None)
    if embeds is None:
        return []
    if getattr(request, "prompt_token_ids", None) is not None or embeds.dim() != 2 or \
            embeds.shape[1] != 1 or str(embeds.dtype) != "torch.float32":
        return None
    values = [float(v) for v in embeds[:, 0].tolist()]
    if not all(v.is_integer() and 0 <= v < 1 << 24 for v in values):
        return None
    return [int(v) for v in values]
