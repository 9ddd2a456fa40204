"""Features made visible to atheris: one tiny function per feature name.

Atheris sees Python coverage only (never torch's C++), so two inputs that exercise an allocator
differently often run the same Python lines. The trick: every feature a target reports (an edge
class hit, a phase a request takes, a pool fill bucket, an outcome) gets its own generated
function, a distinct code object that `instrument()` hands to `atheris.instrument_func`. Calling
it covers a new basic block, so libFuzzer keeps the input that first reached the feature, and its
hit-count buckets (1, 2, 3, 4-7, 8-15, ...) also reward reaching a feature more often.
"""

from __future__ import annotations

from collections import Counter


def _make(name: str):
    # exec gives each feature its own code object; a shared one would share one counter.
    scope: dict = {}
    exec(compile("def feature():\n    return None\n", f"<feature {name}>", "exec"), scope)
    return scope["feature"]


class Features:
    """The feature functions of one target, made before fuzzing starts (atheris instruments
    them once)."""

    def __init__(self, names):
        self.functions = {name: _make(name) for name in sorted(set(names))}

    def instrument(self) -> None:
        import atheris

        for function in self.functions.values():
            atheris.instrument_func(function)

    def touch(self, found: Counter) -> None:
        for name, times in found.items():
            function = self.functions.get(name)
            if function is not None:
                for _ in range(min(times, 64)):  # past 64 the hit-count bucket barely changes
                    function()
