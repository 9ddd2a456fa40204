"""Auxiliary outputs (vLLM's routed experts) in the seeded scheduler sessions
(`Workload(aux_outputs=True)`, `AUX_OUTPUTS`): what building the engine takes, and the fake
worker's share of each step's model output.

vLLM 0.33.0 turns them on with `aux_output_config.enable_return_routed_experts`, and then
builds an `AuxOutputSchedulerConnector` beside the manager (`Scheduler.__init__` 482-486),
whose `max_cache_hit(request)` the scheduler passes as `max_cache_hit_length` at each
admission's lookup (`scheduler.py` 1117-1127): the prompt's blocks, from the first, that the
connector's store keeps (blocks a finished or preempted request left cached on the GPU, filled
by `request_finished`, emptied by `reset`) or the GPU's cache holds, times the block size, at
most `num_tokens - 1`. The config's checks (`VllmConfig._verify_aux_output_compatibility`) ask
for the V2 model runner (the sessions run it under the asynchronous scheduler only:
`vllm_async.py`), a mixture-of-experts model (a two-layer Mixtral `config.json` here) and
prefix caching. The scheduler asks the worker's output for every request that emits a token
(`take_output`): the fake worker gives it rows from the step's token start (the connector's
metadata) past its last token, as a real one gives the rows it captured.
"""

from __future__ import annotations


def aux_output_config(workload) -> dict:
    """The engine's auxiliary-output setting, if the workload asks for it."""
    if not workload.aux_outputs:
        return {}
    if not (workload.async_scheduling and workload.v2_runner):
        raise ValueError("Workload(aux_outputs=True) without async_scheduling and v2_runner: "
                         "vLLM asks the V2 model runner for auxiliary outputs, which the "
                         "sessions run under the asynchronous scheduler only")
    from vllm.config import AuxOutputConfig

    return {"aux_output_config": AuxOutputConfig(enable_return_routed_experts=True)}


def experts(config: dict) -> dict:
    """A model `config.json` made a mixture of experts (vLLM's auxiliary outputs ask for one):
    a two-layer Mixtral of the same size."""
    return dict(architectures=["MixtralForCausalLM"], model_type="mixtral",
                hidden_size=config["hidden_size"], intermediate_size=config["ffn_dim"],
                num_hidden_layers=config["num_hidden_layers"],
                num_attention_heads=config["num_attention_heads"], num_key_value_heads=1,
                vocab_size=config["vocab_size"],
                max_position_embeddings=config["max_position_embeddings"],
                num_local_experts=4, num_experts_per_tok=2, torch_dtype=config["torch_dtype"],
                bos_token_id=1, eos_token_id=2)


def worker_output(scheduler, output, ids, sampled) -> dict | None:
    """The fake worker's auxiliary output for step `output` (None without auxiliary outputs):
    for each request, rows from its token start in the step's metadata to past the tokens it
    will hold once `sampled` (its new tokens) are appended."""
    metadata = getattr(output, "aux_output_connector_metadata", None)
    if scheduler.aux_output_connector is None or metadata is None:
        return None
    import numpy as np

    from vllm.distributed.aux_output_connector.connector import AuxRequestOutput

    rows = {}
    for rid, tokens in zip(ids, sampled):
        request = scheduler.requests.get(rid)
        if request is None:  # (aborted while its step was in flight)
            continue
        start = metadata.requests.get(rid, 0)
        end = request.num_tokens + len(tokens)
        rows[rid] = AuxRequestOutput(start, np.zeros((max(end - start, 0), 2), np.int16))
    return rows
