"""The speculative-decoding settings of `vllm_scheduler.py`'s sessions: a `SpeculativeConfig`
vLLM 0.33.0 builds on the CPU from a draft "checkpoint" that is a `config.json` alone, and the
prompts given as embeddings. What each setting makes of the scheduler's manager:

| Workload                         | drafter                | manager                              |
|----------------------------------|------------------------|--------------------------------------|
| speculative="eagle" (k tokens)   | EAGLE head (a Llama)   | lookahead hashes of 1 token, no drop |
| ... with lookahead_hashes=False  |                        | `use_eagle`: the last-block drop     |
| speculative="mtp" (k tokens)     | k DeepSeek MTP modules | hashes and prefill lookahead of k    |
| ... with lookahead_hashes=False  |                        | prefill lookahead of k, the drop     |
| ... and mtp_modules=1, eagle_drop=False | one module, reused | none of these (MAMBA_MTP)         |

Every allocation reserves the k draft tokens' slots (`num_lookahead_tokens`); the synchronous
sessions feed no draft tokens back (the fake model proposes none), so a step still computes one
token; under the asynchronous scheduler every decode carries k drafts, some accepted
(`vllm_async.py`).
`eagle_groups` flags groups `is_eagle_group` as an engine does for a drafter's layers.
"""

from __future__ import annotations

import json
import os
import tempfile

# A one-layer Llama: the EAGLE head's architecture (vLLM renames it EagleLlamaForCausalLM).
_LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64,
              intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
              num_key_value_heads=4, vocab_size=1000, max_position_embeddings=2048,
              torch_dtype="float16")
# DeepSeek V3 with its MTP modules: vLLM's config override makes it a `deepseek_mtp` draft,
# multi-module when it has more than one module and more than one speculative token.
_DEEPSEEK = dict(_LLAMA, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
                 kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
                 v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
                 moe_intermediate_size=32)


def _draft_folder(config: dict, modules: int) -> str:
    # the folder's name must not say "eagle-" or "eagle3": vLLM reads the method from it
    folder = tempfile.mkdtemp(prefix="kvfuzz-vllm-draft-")
    with open(os.path.join(folder, "config.json"), "w") as handle:
        json.dump(dict(config, num_nextn_predict_layers=modules), handle)
    return folder


def speculative_config(workload, model) -> dict:
    """The engine's `speculative_config` keyword for `workload` (none without speculation);
    `model` the target's ModelConfig (vLLM builds the draft's from it)."""
    if not workload.speculative:
        return {}
    from vllm.config import ParallelConfig, SpeculativeConfig

    k = workload.num_speculative
    draft = _LLAMA if workload.speculative == "eagle" else _DEEPSEEK
    modules = workload.mtp_modules or k
    spec = SpeculativeConfig(method=workload.speculative, model=_draft_folder(draft, modules),
                             num_speculative_tokens=k, target_model_config=model,
                             target_parallel_config=ParallelConfig(),
                             disable_lookahead_block_hashes=not workload.lookahead_hashes,
                             disable_eagle_block_drop=not workload.eagle_drop)
    return {"speculative_config": spec}


def embeddings(prompt: list[int]):
    """A prompt given as embeddings: one float32 value a position (the token's id), what the
    guard maps to `Arrive(embeds=True)`."""
    import torch

    return torch.tensor([[float(token)] for token in prompt], dtype=torch.float32)
