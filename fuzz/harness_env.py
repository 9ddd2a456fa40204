"""Loads a paged target's harness under atheris, instrumenting only what coverage can tell apart.

Instrumented: the implementations' branches (ours or an outside package's; control flow only,
see `instrument_control_flow`) and the per-feature functions of `fuzz.features`. Left plain on
purpose: the oracle and the edge-class code (their branches are what `fuzz.features` reports, at
a fraction of the cost of tracing a per-token loop), the byte decoder (about 200 calls per
input) and the harness: ~1.4x more execs per second than instrumenting all of ours, measured.
"""

from __future__ import annotations

import os
import sys
import types


def impl_specs() -> list[str]:
    return [spec for spec in os.environ.get("KVFUZZ_IMPL", "").split(",") if spec]


def outside_packages() -> list[str]:
    """Top-level packages of outside implementations (module:attr): instrumented like ours."""
    return sorted({spec.split(":")[0].split(".")[0] for spec in impl_specs() if ":" in spec})


def paged_harness(atheris, target: str):
    from kvfuzz.fuzz import features
    from kvfuzz.fuzz.harness import PagedHarness

    harness = PagedHarness(target)  # loads the implementations
    instrument_control_flow(atheris, {"impl", *outside_packages()})
    features.instrument()
    return harness


def trace_harness(atheris, make, modules):
    """A trace target's harness: `make()` builds it; `modules` (imported first, as the
    implementations load lazily) and the oracle get branch coverage."""
    import importlib
    import pkgutil

    import kvfuzz.oracle

    for module in modules:
        importlib.import_module(module)
    for info in pkgutil.iter_modules(oracle.__path__, "oracle."):
        importlib.import_module(info.name)
    harness = make()
    instrument_control_flow(atheris, {"impl", "oracle", *outside_packages()})
    return harness


def instrument_control_flow(atheris, packages) -> None:
    """Branch coverage for every function already imported from `packages`, without atheris's
    comparison tracing: traced `==` on tensors leaked ~12 kB per input (2 GB, then libFuzzer's
    out-of-memory stop, within minutes), and tensor comparisons tell libFuzzer nothing."""
    from atheris.instrument_bytecode import patch_code

    seen = set()
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in packages:
            continue
        for value in list(vars(module).values()):
            members = list(vars(value).values()) if isinstance(value, type) else [value]
            for function in members:
                if (isinstance(function, types.FunctionType) and function.__module__ == name
                        and id(function) not in seen):
                    seen.add(id(function))
                    function.__code__ = patch_code(function.__code__, trace_dataflow=False)
