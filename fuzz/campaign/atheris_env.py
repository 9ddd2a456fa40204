"""Loads a target's harness under atheris, instrumenting only what coverage can tell apart.

Instrumented: the implementations' branches (ours or an outside package's; control flow only, see
`instrument_control_flow`), the oracle for trace targets, and the target's feature functions
(`kvfuzz.fuzz.campaign.features`). Left plain on purpose: the paged oracle and edge-class code
(their branches are what the features report, at a fraction of the cost of tracing a per-token
loop), the byte decoders and the harness: ~1.4x more execs per second than instrumenting all of
ours."""

from __future__ import annotations

import importlib
import sys
import types

from kvfuzz.fuzz.campaign.harness import DifferentialHarness, impl_specs
from kvfuzz.fuzz.engine.apart import enter_sandbox
from kvfuzz.fuzz.targets import TARGETS


def harness_for(atheris, name: str) -> DifferentialHarness:
    target = TARGETS[name]
    for module in target.settings.coverage_modules:  # implementations and drivers load lazily
        importlib.import_module(module)
    harness = DifferentialHarness(target, apart=True)  # forks its judge, loads the implementations
    outside = {spec.split(":")[0].split(".")[0] for spec in impl_specs() if ":" in spec}
    instrument_control_flow(atheris, {*target.settings.coverage_packages, *outside})
    harness.features.instrument()
    return harness


def instrument_control_flow(atheris, packages) -> None:
    """Branch coverage for every function already imported from `packages`, without atheris's
    comparison tracing: traced `==` on tensors leaked ~12 kB per input (2 GB, then libFuzzer's
    out-of-memory stop, within minutes), and tensor comparisons tell libFuzzer nothing."""
    from atheris.instrument_bytecode import patch_code

    seen = set()
    for name, module in list(sys.modules.items()):
        if module is None or not any(name == p or name.startswith(p + ".") for p in packages):
            continue
        for value in list(vars(module).values()):
            members = list(vars(value).values()) if isinstance(value, type) else [value]
            for function in members:
                if (isinstance(function, types.FunctionType) and function.__module__ == name
                        and id(function) not in seen):
                    seen.add(id(function))
                    function.__code__ = patch_code(function.__code__, trace_dataflow=False)


def fuzz(name: str, argv: list[str]) -> None:
    """An atheris worker for target `name` (libFuzzer's arguments in `argv`)."""
    if name not in TARGETS:
        print(f"kvfuzz: error: unknown target {name!r} (known: {', '.join(TARGETS)})",
              file=sys.stderr)
        raise SystemExit(2)
    import atheris

    enter_sandbox()  # an atheris worker imports its implementations itself
    harness = harness_for(atheris, name)
    atheris.Setup(argv, harness.test_one_input)
    atheris.Fuzz()
