"""Makes upstream SGLang and vLLM importable on a CPU-only torch once transformers and torchvision
are installed (impl/upstream.lock: the SWA allocator's module needs them; vLLM's core
modules import transformers too).

Then `import sglang` itself patches transformers' image processors, which import torchvision,
and `sglang.srt.mem_cache.allocator.swa` imports SGLang's model configs, which do too.
The only torchvision 0.28.0 wheel on PyPI (the one for torch 2.13) is built against CUDA: its
compiled ops cannot load on a CPU torch, and its import then fails where it registers fake
(meta) kernels for `torchvision::nms` and `qnms` without checking that they exist. Declaring
those two op schemas first lets the rest of torchvision import; the ops themselves are never
called by an allocator. Nothing is done when torchvision imports by itself (a matching build)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import re
import sys
import warnings

_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
UPSTREAM_PACKAGES = ("sglang", "vllm")  # both import transformers, which imports torchvision
_library = None  # kept alive: the schemas live as long as this Library object


@contextlib.contextmanager
def prepare_import(module_name: str):
    """Around kvfuzz's imports of an implementation's module: SGLang's and vLLM's get torchvision
    prepared, and their import-time warnings about CUDA-only quantization methods (two per
    process, about code no allocator runs) and vLLM's missing compiled kernels are not shown."""
    package = module_name.split(".")[0]
    engines = {package} & set(UPSTREAM_PACKAGES) or engines_named_by(module_name)
    if not engines:
        yield
        return
    # vLLM warns on every refused reset_prefix_cache, an outcome here; and SGLang's modules
    # import vLLM's platform, which warns that its compiled kernels (vllm._C) are missing, once
    # a worker process: kvfuzz installs no engine's compiled packages, and no allocator uses them.
    # (Only where not set already: `setLevel` clears every logger's cache, some 10 ms with the
    # engines' loggers loaded, and an offload trace's driver comes through here once a trace.)
    vllm_logger = logging.getLogger("vllm")
    if vllm_logger.level != logging.ERROR:
        vllm_logger.setLevel(logging.ERROR)
    prepare()
    tolerated = registrations_tolerated() if "sglang" in engines else contextlib.nullcontext()
    with warnings.catch_warnings(), tolerated:
        warnings.filterwarnings("ignore", message="Only CUDA", category=UserWarning)
        yield


@contextlib.contextmanager
def registrations_tolerated():
    """An earlier SGLang registers model configs under names the lock's newer transformers ships
    itself (`qwen3_asr`, up to SGLang 0.5.19), and transformers refuses a name twice, so its
    memory-pool modules (the SWA allocator's) do not import. No allocator reads a model config:
    while kvfuzz imports SGLang such a registration goes through (`exist_ok`). A release whose
    names are all new registers exactly as before."""
    try:
        from transformers.models.auto import configuration_auto
    except Exception:  # noqa: BLE001 - no transformers (or a broken one): nothing to tolerate
        yield
        return
    mapping = type(configuration_auto.CONFIG_MAPPING)
    original = mapping.register

    def register(self, key, value, exist_ok=False):
        return original(self, key, value, exist_ok=True)

    mapping.register = register
    try:
        yield
    finally:
        mapping.register = original


def engines_named_by(module_name: str) -> set[str]:
    """The engines an outside module's source names (a user's wrapper of SGLang's allocator
    needs the same preparation as SGLang's own module), read without importing the module;
    its package's `__init__` files are read too. Empty for kvfuzz's own modules."""
    if module_name.split(".")[0] == "kvfuzz":
        return set()
    found, parts = set(), module_name.split(".")
    for depth in range(1, len(parts) + 1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:depth]))
        except (ImportError, ValueError):  # a parent that does not import: the import says so
            return found
        origin = getattr(spec, "origin", None)
        if origin and origin.endswith(".py"):
            try:
                with open(origin, encoding="utf-8", errors="replace") as handle:
                    found |= set(re.findall(r"\b(sglang|vllm)\b", handle.read(1 << 20)))
            except OSError:
                pass
        if found:  # prepared before the next level's find_spec imports this package
            return found
    return found


def prepare() -> None:
    """Call before importing upstream SGLang (kvfuzz's own imports do: `prepare_import`)."""
    global _library
    if _library is not None or importlib.util.find_spec("torchvision") is None:
        return
    import torch

    try:
        importlib.import_module("torchvision")  # a CPU build imports by itself
        return
    except RuntimeError:  # "operator torchvision::nms does not exist"
        pass
    _library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _library.define(schema)
    importlib.import_module("torchvision")


@contextlib.contextmanager
def second_copy(module_name: str):
    """Around executing a second copy of an upstream module (a mutant of its source): SGLang
    modules declare named invariants at import (`sglang.srt.utils.invariants`), and a name may be
    declared once per process, so the copy declares its own with the registry set aside, and
    the original registry comes back after."""
    invariants = sys.modules.get("sglang.srt.utils.invariants")
    if module_name.split(".")[0] != "sglang" or invariants is None:
        yield
        return
    saved = dict(invariants._REGISTRY)
    invariants._REGISTRY.clear()
    try:
        yield
    finally:
        invariants._REGISTRY.clear()
        invariants._REGISTRY.update(saved)
