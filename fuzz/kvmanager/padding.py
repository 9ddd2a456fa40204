"""vLLM's spec-decode padded admission (`pad_spec_decode` in `Scheduler.schedule`, vllm 0.33.0):
a waiting request whose hit leaves one token is admitted with `1 + num_spec_tokens` new tokens,
the token and placeholder draft rows (-1) past the request's tokens, so that the step keeps the
CUDA graph's decode shape. The manager gives the rows slots and caches none of them (its cache
stops at the request's tokens); the scheduler rejects them when the step's output is processed
(`update_from_output` rolls `num_computed_tokens` back by them). The trace's op is a `schedule`
with `pad` (`strategies/kvmanager/trace.Schedule`): the lock step pads by `placeholder_rows`,
the guard reads a padded call back by `padding`. Standard library only."""

from __future__ import annotations

from kvfuzz.strategies.kvmanager.codec import MAX_PAD


def placeholder_rows(trace, left: int, hit: int, chunk: int, pad: int) -> int:
    """The rows an admission of a request with `left` tokens after its `hit`, given `chunk`
    tokens, is padded with: `pad` where one token is left, the chunk (the step's budget) holds
    the token and the rows, and they leave room for the sampled token within max_model_len
    (the scheduler's own conditions); else none. Not under asynchronous scheduling: the lock
    step does not model its tokens in flight with rejected drafts."""
    if not pad or left != 1 or chunk < 1 + pad or trace.async_scheduling:
        return 0
    return pad if hit + 1 + pad + 1 <= trace.max_model_len else 0


def padding(header, n: int, left: int, hit: int) -> int:
    """The placeholder rows among an admission's `n` new tokens that the guard maps to a padded
    `schedule`: `n - 1` where the lock step's rule pads as many; else 0 (the guard then refuses
    an `n` past `left`). Never with a Mamba group: the scheduler's aligned split may drop the
    padding, which the guard does not read."""
    pad = n - 1
    if not 0 < pad <= MAX_PAD or header.mamba_mode:
        return 0
    return placeholder_rows(header, left, hit, n, pad)
