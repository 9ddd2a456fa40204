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
    process, about code no allocator runs) are not shown."""
    package = module_name.split(".")[0]
    if package not in UPSTREAM_PACKAGES:
        yield
        return
    if package == "vllm":  # it warns on every refused reset_prefix_cache, an outcome here
        logging.getLogger("vllm").setLevel(logging.ERROR)
    prepare()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Only CUDA", category=UserWarning)
        yield


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
