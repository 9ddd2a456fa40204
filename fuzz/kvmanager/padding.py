"""vLLM's spec-decode padded admission (`pad_spec_decode` in `Scheduler.schedule`, vllm 0.33.0):
a waiting request left with one token to compute is scheduled with `1 + num_spec_tokens` new
tokens, the token and placeholder draft rows (-1) past the request's tokens, so that the step
keeps the CUDA graph's decode shape. The manager gives the rows slots and caches none of them
(its cache stops at the request's tokens); the scheduler rejects them when the step's output is
processed (`update_from_output` rolls `num_computed_tokens` back by them). The trace's ops: a
`schedule` (`strategies/kvmanager/trace.Schedule`) or a connector's `connect` with `pad`: the
lock step pads by `placeholder_rows`, the guard reads a padded call back by `padding`.

Where the scheduler pads (its conditions read from the waiting loop of `Scheduler.schedule`):
- a fresh admission whose local hit, plus a synchronous load's external tokens under a KV
  connector, leaves one token (`num_computed_tokens` = local + external): `allocate_slots(
  request, 1 + k, hit, hit blocks, num_lookahead_tokens, num_external_computed_tokens=external)`;
- the first allocation after an asynchronous KV load (the `else` branch: no lookup, the
  request's own `num_computed_tokens`, the last token when the whole prompt loaded):
  `allocate_slots(request, 1 + k, num_lookahead_tokens)`, no hit and no external tokens;
- under asynchronous scheduling as without it (the condition does not read it): the
  admission's call is the same, only the request's state after it differs (`lock step`).
Never the admission of an asynchronous load itself: it computes no tokens (`num_new_tokens`
0, before the padding is looked at). Standard library only.

Beside a Mamba "align" group (`need_mamba_block_aligned_split`) the padded count goes through
`_mamba_block_aligned_split` (scheduler.py 1349-1370, 546-658), and where the split changes it
the padding is dropped whole (`num_new_tokens = 1`, `pad_spec_decode = False`): never shortened.
The split returns the count unchanged where the step starts at or past `prefill_end = max(
num_prompt_tokens, num_tokens - 1)`, so a request with output tokens (a preempted one
readmitted: MAMBA_MTP's seed 70) always keeps its padding; a prompt whose hit leaves its last
token keeps it unless a mandatory stop falls strictly inside the rows (the next block boundary
of a start inside a block: a partial hit; the partial tail's or a shared-prefix junction's
stop). The guard reads which from the call's token count (`padding`: 1 + k padded, 1 not); the
trace's `pad` is what the scheduler kept, and the reduced mode (`fuzz/kvmanager/align.py`)
judges the padded step over its 1 + k rows (the Mamba table as the step allocated it until the
request's next step, as after rejected drafts), the rows rolled back at once."""

from __future__ import annotations

from kvfuzz.strategies.kvmanager.codec import MAX_PAD


def placeholder_rows(trace, left: int, computed: int, chunk: int, pad: int) -> int:
    """The rows an allocation of a waiting request with `left` tokens after its `computed`
    ones (its hit, plus external tokens, or what its load left computed), given `chunk`
    tokens, is padded with: `pad` where one token is left, the chunk (the step's budget) holds
    the token and the rows, and they leave room for the sampled token within max_model_len
    (the scheduler's own conditions); else none."""
    if not pad or left != 1 or chunk < 1 + pad:
        return 0
    return pad if computed + 1 + pad + 1 <= trace.max_model_len else 0


def padding(header, n: int, left: int, computed: int, align: bool = False) -> int:
    """The placeholder rows among a waiting request's `n` new tokens that the guard maps to a
    padded `schedule` or `connect`: `n - 1` where the lock step's rule pads as many; else 0
    (the guard then refuses an `n` past `left`). With `align` (a plain admission's, through a
    KV connector too, or the first step after a load: not an admission with external tokens,
    whose reduced mode reads no `pad`) beside a Mamba "align" group too:
    the scheduler's aligned split runs after the padding and keeps all 1 + k rows or drops
    them all (`num_new_tokens = 1`), so a call of `n > left` tokens is one it padded (above).
    Else never with a Mamba group (not mapped: refused by name)."""
    pad = n - 1
    if not 0 < pad <= MAX_PAD or header.mamba_mode not in ("", "align" if align else ""):
        return 0
    return placeholder_rows(header, left, computed, n, pad)

# The lock step's edge classes of the padded admissions beyond the plain one (where each is)
PADDED = ("admission padded under a connector", "admission padded after its load",
          "admission padded under asynchronous scheduling")
