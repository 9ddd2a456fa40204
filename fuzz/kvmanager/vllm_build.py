"""vLLM's v1 `Scheduler` (vllm 0.33.0) built on the CPU with no model download, over the
workload's KV-cache groups and pool (`build_scheduler`; `vllm_scheduler.py` runs its sessions).

What building it on a CPU-only machine takes (each for a reason of this machine, not of the
manager): `VLLM_TARGET_DEVICE=cpu` (else no platform is found and the device config fails);
the model "checkpoint" is a `config.json` written to a temporary folder (a two-layer OPT), with
the tokenizer skipped (a two-layer Mixtral where auxiliary outputs ask for experts:
`vllm_aux.py`); and the model registry's inspection of the model class is answered for
the duration of the config's construction with the facts of a plain text decoder (vLLM
inspects in a subprocess that cannot import the fetched engine, and the model module needs
packages the allocators do not). The scheduler itself, its manager and its pool are vLLM's,
unpatched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile

from kvfuzz.fuzz.kvmanager.guard_mamba import cache_settings, hashing, mamba_group
from kvfuzz.fuzz.kvmanager.vllm_aux import aux_output_config, experts as mixture
from kvfuzz.fuzz.kvmanager.vllm_workloads import Workload


def _text_decoder_info(registry):
    """The registry's facts of a plain text decoder, whatever fields this version has."""
    known = dict(is_text_generation_model=True, attn_type="decoder", supports_pp=True,
                 default_seq_pooling_type="LAST", default_tok_pooling_type="ALL",
                 score_type="bi-encoder")

    def inspect(self):
        values = {}
        for item in dataclasses.fields(registry._ModelInfo):
            if item.name == "architecture":
                values[item.name] = self.class_name
            elif item.name in known:
                values[item.name] = known[item.name]
            else:
                values[item.name] = () if "tuple" in str(item.type) else False
        return registry._ModelInfo(**values)
    return inspect


@contextlib.contextmanager
def _inspection_answered():
    import vllm.model_executor.models.registry as registry

    lazy = registry._LazyRegisteredModel
    original = lazy.inspect_model_cls
    lazy.inspect_model_cls = _text_decoder_info(registry)
    try:
        yield
    finally:
        lazy.inspect_model_cls = original


def _cpu_platform() -> None:
    """vLLM's platform is resolved once per process, on first use: one resolved before
    `VLLM_TARGET_DEVICE` was set (by an import of the released manager, say) found none, and
    is resolved again."""
    import vllm.platforms as platforms

    if type(platforms._current_platform).__name__ == "UnspecifiedPlatform":
        platforms._current_platform = None


def _model_folder(experts: bool = False) -> str:
    folder = tempfile.mkdtemp(prefix="kvfuzz-vllm-model-")
    config = dict(architectures=["OPTForCausalLM"], model_type="opt", hidden_size=64,
                  ffn_dim=128, word_embed_proj_dim=64, num_hidden_layers=2,
                  num_attention_heads=4, vocab_size=1000, max_position_embeddings=2048,
                  torch_dtype="float16", bos_token_id=2, eos_token_id=2, pad_token_id=1)
    if experts:  # (auxiliary outputs ask for a mixture of experts: vllm_aux.py)
        config = mixture(config)
    with open(os.path.join(folder, "config.json"), "w") as handle:
        json.dump(config, handle)
    return folder


@contextlib.contextmanager
def _built_by(module, name: str, cls):
    """`module.name` is `cls` while the scheduler is built (a mutant of the released class,
    say): vLLM builds its manager and its pool by those names."""
    original = getattr(module, name)
    setattr(module, name, cls or original)
    try:
        yield
    finally:
        setattr(module, name, original)


def _connector(workload: Workload, seed: int) -> dict:
    """The engine's KV-connector setting, if the workload has one."""
    if workload.fake_connector:
        from kvfuzz.fuzz.kvmanager.fake_connector import connector_config as fake_config

        return {"kv_transfer_config": fake_config(seed, workload.sync_load_failures,
                                                  hybrid=bool(workload.window or
                                                              workload.mamba),
                                                  delivery=workload.kv_delivery,
                                                  producer=workload.kv_producer,
                                                  async_only=bool(workload.mamba))}
    if workload.offload_bytes:
        from kvfuzz.fuzz.kvmanager.offload_worker import connector_config

        return {"kv_transfer_config": connector_config(workload.offload_bytes)}
    return {}


def build_scheduler(workload: Workload = Workload(), manager_class=None, pool_class=None,
                    seed: int = 0):
    """vLLM's v1 Scheduler over one full-attention group (and a window's with `workload.window`)
    of `workload.blocks` blocks, with
    prefix caching and chunked prefill (the engine's defaults otherwise); its manager an
    instance of `manager_class` (default: vLLM's `KVCacheManager`), its pool one of
    `pool_class` (default: vLLM's `BlockPool`)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import("vllm"):
        import torch
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.v1.core import kv_cache_coordinator
        from vllm.v1.core.sched import scheduler as scheduler_module
        from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                                KVCacheGroupSpec)
        from vllm.v1.structured_output import StructuredOutputManager

        from kvfuzz.fuzz.kvmanager.vllm_speculative import speculative_config

        _cpu_platform()
        with _inspection_answered():
            model = ModelConfig(model=_model_folder(workload.aux_outputs), dtype="float16",
                                seed=0, skip_tokenizer_init=True,
                                max_model_len=workload.max_model_len)
            # (the draft's model class is inspected too)
            speculative = speculative_config(workload, model)
        config = VllmConfig(
            model_config=model,
            scheduler_config=SchedulerConfig(
                max_num_seqs=workload.max_seqs,
                max_num_batched_tokens=workload.max_batched_tokens,
                max_model_len=workload.max_model_len, enable_chunked_prefill=True,
                is_encoder_decoder=False),
            cache_config=CacheConfig(block_size=workload.block_size,
                                     enable_prefix_caching=True, **cache_settings(workload)),
            **_connector(workload, seed), **speculative, **aux_output_config(workload))
        config.cache_config.num_gpu_blocks = workload.blocks
        if workload.async_scheduling:  # (turned off by the CPU platform: vllm_async.py)
            from kvfuzz.fuzz.kvmanager.vllm_async import asynchronous

            asynchronous(config, workload)
        spec = FullAttentionSpec(block_size=workload.block_size, num_kv_heads=1, head_size=8,
                                 dtype=torch.float16)
        groups = [KVCacheGroupSpec(["layer0"], spec, is_eagle_group=0 in workload.eagle_groups)]
        if workload.window:
            from vllm.v1.kv_cache_interface import SlidingWindowSpec

            dtype = torch.bfloat16 if workload.zeroing else torch.float16
            groups.append(KVCacheGroupSpec(["layer1"], SlidingWindowSpec(
                block_size=workload.block_size, num_kv_heads=1, head_size=8, dtype=dtype,
                sliding_window=workload.window), is_eagle_group=1 in workload.eagle_groups))
        groups += [group for group in (mamba_group(workload, torch),) if group]
        kv_config = KVCacheConfig(num_blocks=workload.blocks, kv_cache_tensors=[],
                                  kv_cache_groups=groups)
        sizes = hashing(config, kv_config)  # (guard_mamba.py: the engine core's resolution)
        from kvfuzz.fuzz.kvmanager.vllm_async import model_runner

        with _built_by(scheduler_module, "KVCacheManager", manager_class), \
                _built_by(kv_cache_coordinator, "BlockPool", pool_class), \
                model_runner(workload):
            # the engine's own choice of class where the workload asks for asynchronous
            # scheduling (AsyncScheduler, a subclass that builds its manager by the same name)
            cls = config.scheduler_config.get_scheduler_cls() if workload.async_scheduling \
                else scheduler_module.Scheduler
            return cls(
                vllm_config=config, kv_cache_config=kv_config,
                structured_output_manager=StructuredOutputManager(config),
                block_size=workload.block_size, log_stats=True, **sizes)
