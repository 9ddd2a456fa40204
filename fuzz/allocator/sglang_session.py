"""SGLang's own `Scheduler` (sglang 0.5.23) as a real client of its token-to-KV-pool allocator:
built on the CPU with no model download, fed seeded requests that share prefixes, with chunked
prefill and a pool small enough that requests compete, stepped (the body of SGLang's
`event_loop_normal`) until every request has finished.

    session = run_session(seed=0, wrap=lambda allocator: kvfuzz.guard(allocator, "allocator"))

`wrap` replaces the allocator as it is built, before its first call: the scheduler, its radix
tree and its model runner then all hold the wrapper and call it as they call their own.

What building it on a CPU-only machine takes: a two-layer Llama whose "checkpoint" is a
`config.json` in a temporary folder, with dummy weights and no tokenizer; `device="cpu"`,
float32, no CUDA graph, no overlap scheduling (its loop waits on CUDA streams), no server
warm-up; and SGLang's process-wide config published as its launcher does
(`runtime_context.publish`). Unlike vLLM's scheduler, no output is faked: the model's forward
runs (random weights, greedy sampling), and requests end at their `max_new_tokens` (EOS is
ignored). The scheduler, its allocator, its radix tree and its request-to-token pool are
SGLang's, unpatched; only the allocator's two construction names are replaced while it is
built, and SGLang's own test knob `SGLANG_TEST_RETRACT` forces retraction when asked.

One session per process: SGLang builds its parallel groups once per process (a second
Scheduler raises "init_parallel_runtime() ran twice"), and its scheduler starts threads and
opens sockets it never closes. A session runs in a process of its own: the command in
`sglang_scheduler.py` (`python -m kvfuzz.fuzz.allocator.sglang_scheduler`,
`session_in_subprocess`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import sys
import tempfile
from array import array
from dataclasses import dataclass, field

# The names `kv_cache_configurator` builds the allocator by: page size 1, and every other;
# for a hybrid sliding-window model, the SWA allocator's.
ALLOCATOR_NAMES = ("TokenToKVPoolAllocator", "PagedTokenToKVPoolAllocator")
SWA_ALLOCATOR_NAMES = ("SWATokenToKVPoolAllocator",)
VOCAB = 1000
MODEL_CONFIG = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64,
                    intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                    num_hidden_layers=2, vocab_size=VOCAB, max_position_embeddings=2048,
                    rms_norm_eps=1e-5, torch_dtype="float32", bos_token_id=1, eos_token_id=2)
# A hybrid sliding-window model SGLang runs on the CPU: Mellum (a model SGLang lists as hybrid
# SWA) with every MLP dense, no attention sinks (the CPU attention backend takes none), a
# window of 32 tokens on every other layer. Its experts are never built, but SGLang's expert
# placement fails on a count of 0.
SWA_MODEL_CONFIG = dict(
    architectures=["MellumForCausalLM"], model_type="mellum", hidden_size=64,
    intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    num_hidden_layers=4, vocab_size=VOCAB, max_position_embeddings=2048, rms_norm_eps=1e-5,
    torch_dtype="float32", bos_token_id=1, eos_token_id=2, pad_token_id=0,
    tie_word_embeddings=False, sliding_window=32,
    layer_types=["sliding_attention", "full_attention"] * 2, mlp_layer_types=["dense"] * 4,
    hidden_act="silu", num_experts=2, num_experts_per_tok=1, moe_intermediate_size=64,
    attention_bias=False, rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 500000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})


@dataclass(frozen=True)
class Workload:
    """The session's engine settings and requests: `groups` prefixes (whole pages) shared by
    `per_group` requests each, plus `loners` requests with none; prompts of up to `max_prompt`
    tokens; `max_new_tokens` generated at most; arrivals over the first steps. `retract`
    forces a decode retraction every `retract_interval` forward passes (SGLang's own test
    knob): at these sizes the pool alone rarely makes SGLang retract."""

    page_size: int = 16
    max_total_tokens: int = 640
    chunked_prefill_size: int = 64
    max_running_requests: int = 8
    groups: int = 2
    per_group: int = 4
    loners: int = 2
    max_prompt: int = 180
    max_new_tokens: int = 40
    retract: bool = False
    retract_interval: int = 25
    max_steps: int = 5000
    swa: bool = False  # the hybrid sliding-window model: SGLang builds its SWA allocator
    # UnifiedRadixCache's tree core: "" (SGLang's default, the bundled Rust one), "rust" or
    # "python". The Rust core releases a tree value's components (full, SWA) in an order that
    # varies from process to process; the Python core's is fixed (a session replays as it ran).
    tree_core: str = ""

    def model_config(self) -> dict:
        return SWA_MODEL_CONFIG if self.swa else MODEL_CONFIG

    def allocator_names(self) -> tuple[str, ...]:
        return SWA_ALLOCATOR_NAMES if self.swa else ALLOCATOR_NAMES


@dataclass
class SessionResult:
    steps: int
    finished: int
    requests: int
    retractions: int
    allocator: object                   # what the scheduler called: the wrapper, or its own
    tree_core: str = ""                 # the prefix cache's tree core that ran, by class name
    batches: dict[str, int] = field(default_factory=dict)  # forward mode -> batches run
    notes: list[str] = field(default_factory=list)


def _model_folder(config: dict) -> str:
    """A folder holding the model's `config.json`, one per config (reused by later sessions,
    so that a campaign of subprocesses leaves one folder behind, not one each)."""
    text = json.dumps(config, sort_keys=True)
    folder = os.path.join(tempfile.gettempdir(),
                          f"kvfuzz-sglang-model-{hashlib.sha256(text.encode()).hexdigest()[:12]}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        staging = f"{path}.{os.getpid()}"
        with open(staging, "w") as handle:
            handle.write(text)
        os.replace(staging, path)  # never a half-written config for a concurrent session
    return folder


def _retraction_knob(workload: Workload) -> None:
    """SGLang's scheduler module reads `SGLANG_TEST_RETRACT` and its interval once, when it is
    first imported: set in the environment before that, and set again on the module where the
    caller imported it already (with whatever the environment said then)."""
    os.environ["SGLANG_TEST_RETRACT"] = "true" if workload.retract else "false"
    os.environ["SGLANG_TEST_RETRACT_INTERVAL"] = str(workload.retract_interval)
    module = sys.modules.get("sglang.srt.managers.scheduler")
    if module is not None:
        module.TEST_RETRACT = workload.retract
        module.TEST_RETRACT_INTERVAL = workload.retract_interval


def _server_args(workload: Workload):
    from sglang.srt.server_args import ServerArgs

    # SWA: both pools the same size. At SGLang's default SWA share (0.8) the CPU attention
    # backend (torch_native) indexes the SWA layers' buffer with full-pool slots from
    # `req_to_token`, never translated, and the first decode reads past it
    # (docs/upstream-sglang.md): an attention backend's bug, not the allocator's.
    extra = {"swa_full_tokens_ratio": 1.0} if workload.swa else {}
    return ServerArgs(
        **extra,
        model_path=_model_folder(workload.model_config()), device="cpu", dtype="float32",
        load_format="dummy",
        skip_tokenizer_init=True, random_seed=0, page_size=workload.page_size,
        max_total_tokens=workload.max_total_tokens,
        chunked_prefill_size=workload.chunked_prefill_size,
        max_running_requests=workload.max_running_requests,
        disable_overlap_schedule=True, disable_cuda_graph=True, skip_server_warmup=True)


@contextlib.contextmanager
def _allocator_built_by(factory, names):
    """While the scheduler is built, `kv_cache_configurator` builds its allocator by
    `factory(original_class, *args, **kwargs)` under each of its `names` (it looks them up as
    module globals at the construction site, and checks its allocator's class by them: each
    stays a class, `kvfuzz_stand_in`); the names come back afterwards, whatever happened."""
    from sglang.srt.mem_cache import kv_cache_configurator as configurator

    from kvfuzz.fuzz.engine.autoguard.kvfuzz_stand_in import stand_in

    originals = {name: getattr(configurator, name) for name in names}
    for name, original in originals.items():
        setattr(configurator, name, stand_in(original, lambda *args, _original=original,
                                             **kwargs: factory(_original, *args, **kwargs)))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(configurator, name, original)


def _check_holders(scheduler, allocator) -> None:
    """The scheduler, its radix tree and its model runner hold the allocator that was built
    (the wrapper, when there is one): a holder with another means some call goes around it."""
    holders = {"scheduler": scheduler.token_to_kv_pool_allocator,
               "tree_cache": scheduler.tree_cache.token_to_kv_pool_allocator,
               "model_runner": scheduler.tp_worker.model_runner.token_to_kv_pool_allocator}
    astray = [name for name, held in holders.items() if held is not allocator]
    if astray:
        raise RuntimeError(f"SGLang's {', '.join(astray)} hold(s) another allocator than the "
                           f"one built ({type(allocator).__name__})")


def build_scheduler(workload: Workload = Workload(), wrap=None, allocator_class=None):
    """SGLang's Scheduler over a pool of `workload.max_total_tokens` tokens in pages of
    `workload.page_size`, with its radix cache and chunked prefill (the engine's defaults
    otherwise); its allocator an instance of `allocator_class` (default: the class SGLang
    picks, `PagedTokenToKVPoolAllocator`, or `TokenToKVPoolAllocator` at page size 1, or for
    `workload.swa` `SWATokenToKVPoolAllocator`, with a full and an SWA pool of that size),
    built with the engine's arguments and handed to `wrap(allocator)` before anything calls
    it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if workload.tree_core:  # read when the cache is built
        os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = workload.tree_core
    _retraction_knob(workload)
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import("sglang"):
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.runtime_context import SpawnRanks, publish
        from sglang.srt.server_args import PortArgs

        server_args = _server_args(workload)
        # What `run_scheduler_process` does first: the process-wide config the engine reads.
        publish(server_args, role="scheduler",
                ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
        built = []

        def factory(original, *args, **kwargs):
            cls = allocator_class or original
            if not issubclass(cls, original) and hasattr(original, "register"):
                # A mutant of SGLang's source is a class of a rebuilt module: registered as a
                # virtual subclass (SGLang's allocator classes are ABCs), so that SGLang's own
                # isinstance checks of its allocator take it (this process runs one session).
                original.register(cls)
            allocator = cls(*args, **kwargs)
            built.append(allocator if wrap is None else wrap(allocator))
            return built[-1]

        names = workload.allocator_names()
        with _allocator_built_by(factory, names):
            scheduler = Scheduler(server_args, PortArgs.init_new(server_args))
    if len(built) != 1:
        raise RuntimeError(f"SGLang built {len(built)} allocators by {names}, not one")
    _check_holders(scheduler, built[0])
    return scheduler


def _prompts(workload: Workload, rng: random.Random) -> list[list[int]]:
    """The prompts, shuffled: each group's share a prefix of whole pages (of 16 tokens or
    more, so that page size 1 shares prefixes of the same lengths as page size 16)."""
    token = lambda: rng.randrange(3, VOCAB)  # noqa: E731 - above the special ids, in the vocabulary
    unit = workload.page_size * max(1, 16 // workload.page_size)
    most = max(1, min(5, (workload.max_prompt - 1) // unit))
    prefixes = [[token() for _ in range(unit * rng.randint(1, most))]
                for _ in range(workload.groups)]
    prompts = [prefix + [token() for _ in range(rng.randint(1, max(1, workload.max_prompt
                                                                    - len(prefix))))]
               for prefix in prefixes for _ in range(workload.per_group)]
    prompts += [[token() for _ in range(rng.randint(1, workload.max_prompt))]
                for _ in range(workload.loners)]
    rng.shuffle(prompts)
    return prompts


def _requests(workload: Workload, rng: random.Random):
    """(arrival step, request) pairs, as SGLang's tokenizer manager sends them: half at the
    first step, the others over the next twelve."""
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    prompts = _prompts(workload, rng)
    made = []
    for index, prompt in enumerate(prompts):
        params = SamplingParams(max_new_tokens=rng.randint(1, workload.max_new_tokens),
                                temperature=0.0, ignore_eos=True)
        params.normalize(None)  # what the tokenizer manager does (else no stop strings: None)
        params.verify(VOCAB)
        # An array("q"), as the tokenizer sends: SGLang adds the request's output array to it.
        request = TokenizedGenerateReqInput(
            rid=f"req-{index}", input_text=None, input_ids=array("q", prompt),
            input_embeds=None, mm_inputs=None, token_type_ids=None, sampling_params=params,
            return_logprob=False, logprob_start_len=-1, top_logprobs_num=0,
            token_ids_logprob=None, stream=False)
        made.append((0 if index < len(prompts) // 2 else rng.randint(1, 12), request))
    return sorted(made, key=lambda pair: pair[0])


def _admit(scheduler, inputs) -> list:
    """The scheduler's own `Req`s for `inputs`, once it has taken them in (retraction puts
    the same objects back in its queue, so they say to the end whether they finished)."""
    scheduler.process_input_requests(inputs)
    wanted = {request.rid for request in inputs}
    admitted = [req for req in scheduler.waiting_queue if req.rid in wanted]
    if len(admitted) != len(wanted):
        raise RuntimeError(f"SGLang queued {len(admitted)} of {len(wanted)} requests")
    return admitted


def _step(scheduler, result: SessionResult):
    """One pass of `event_loop_normal`'s body (less receiving from the socket, which
    `_admit` stands in for); the batch it ran, or None when it was idle."""
    plan = scheduler.get_next_batch_to_run(running_batch=scheduler.running_batch,
                                           last_batch=scheduler.last_batch)
    scheduler.running_batch = plan.running_batch
    batch = plan.batch_to_run
    if batch:
        scheduler.process_batch_result(batch, scheduler.run_batch(batch))
        mode = batch.forward_mode.name
        result.batches[mode] = result.batches.get(mode, 0) + 1
    else:
        scheduler.on_idle()  # SGLang's idle self-check: every token free or in the tree
    scheduler.last_batch = batch
    return batch


def run_session(seed: int = 0, wrap=None, workload: Workload = Workload(),
                allocator_class=None) -> SessionResult:
    """One seeded scheduler session, every request run to its end (at most
    `workload.max_steps` steps), ending on an idle step (where SGLang checks its pool).
    `wrap(allocator)` stands in for the allocator the engine builds."""
    rng = random.Random(seed)
    scheduler = build_scheduler(workload, wrap, allocator_class)  # first: prepares SGLang
    arrivals = _requests(workload, rng)
    result = SessionResult(0, 0, len(arrivals), 0, scheduler.token_to_kv_pool_allocator,
                           type(getattr(scheduler.tree_cache, "tree_core", None)).__name__)
    reqs = []
    while result.steps < workload.max_steps:
        due = [request for step, request in arrivals if step <= result.steps]
        if due:
            reqs += _admit(scheduler, due)
            arrivals = arrivals[len(due):]
        batch = _step(scheduler, result)
        result.steps += 1
        if batch is None and not arrivals and all(req.finished() for req in reqs):
            break
    result.finished = sum(req.finished() for req in reqs)
    result.retractions = sum(req.retraction_count for req in reqs)
    if result.finished < result.requests:
        result.notes.append(f"{result.requests - result.finished} request(s) unfinished "
                            f"after {result.steps} steps")
    return result
