"""The Target protocol: everything the engine (seeded diff, replay, fuzz campaigns, corpus tools,
shrinking, summaries, reports) knows about a target. A target subclasses `Target` and fills in
the methods marked "each target"; the engine never names a target.

Inputs are frozen dataclasses with `origin` (an `Origin` or None) and `note` (free text)
fields; both are provenance, left out of the content id.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator

from kvfuzz.fuzz.report import Divergence
from kvfuzz.impl.registry import BUNDLED, Implementation, ImplementationError, resolve

AGREE, DIVERGE, OUTSIDE, KNOWN = "agree", "diverge", "outside contract", "known difference"


@dataclass
class Outcome:
    """What one implementation did with one input."""

    status: str                            # AGREE, DIVERGE, OUTSIDE or KNOWN
    divergence: Divergence | None = None   # DIVERGE and KNOWN
    outside: tuple[str, ...] = ()          # OUTSIDE: the contract's violations, by kind
    behaviour: str = ""                    # OUTSIDE: what the implementation did ("raised ...")
    features: Iterable[str] | Counter = field(default_factory=tuple)  # what the input exercised


class Target:
    """Base class of every target. Class attributes configure the engine; methods marked
    "each target" must be overridden."""

    name: str                    # "extend": the command-line name and the corpus file prefix
    format: str                  # the "format" field of its JSON files
    noun = "case"                # what one input is called in reports ("case", "trace")
    default_cases = 200          # `kvfuzz diff` without --cases
    chunk_sizes = (25, 500)      # seeded runs: inputs per chunk handed to a worker (min, max)
    shrink_budget = (3000, 30.0)  # re-runs, seconds
    implementations: tuple[Implementation, ...] = ()
    fuzz_implementations: tuple[str, ...] | None = None  # `kvfuzz fuzz` default: bundled ones
    fuzz_flags: tuple[str, ...] = ()  # libFuzzer flags before the user's
    seed_bytes = 256             # the length of each of `seed_inputs`
    # Packages whose functions get branch coverage under atheris, and modules imported first.
    coverage_packages: tuple[str, ...] = ("kvfuzz.impl",)
    coverage_modules: tuple[str, ...] = ()

    # -- inputs (each target) ------------------------------------------------------------------
    def generate(self, seed: int, index: int):
        """Input `index` of `seed`, the same forever (the generator is versioned)."""
        raise NotImplementedError

    def generate_for(self, impls, seed: int, index: int):
        """Input `index` of `seed` for `impls`: a target whose generator respects what its
        implementations declare (`Implementation.preconditions`) overrides this and
        `from_bytes_for`; by default every implementation gets the same inputs."""
        return self.generate(seed, index)

    def from_bytes_for(self, impls, data: bytes):
        return self.from_bytes(data)

    def from_bytes(self, data: bytes):
        """The input fuzzer bytes stand for: the seeded generator fed by the bytes. Never raises."""
        raise NotImplementedError

    def encode(self, item) -> bytes | None:
        """Bytes that `from_bytes` turns back into `item` (seeds a campaign), or None."""
        return None

    def seed_inputs(self) -> list[bytes]:
        """Fuzzer inputs a campaign starts from besides the encoded corpus: long pseudo-random
        ones, decoded into inputs as rich as the seeded generator's. From an empty corpus
        libFuzzer spent thousands of inputs growing trivial ones (the detection benchmark:
        mutants the seeded generator finds at once went unfound for 20 s)."""
        return [random.Random(f"seed/{self.name}/{i}").randbytes(self.seed_bytes)
                for i in range(16)]

    def from_json(self, data: dict, source: str):
        """Decode and validate; every problem raises `FormatError` naming source, field, value."""
        raise NotImplementedError

    def to_json(self, item) -> dict:
        raise NotImplementedError

    def input_id(self, item) -> str:
        """A short hash of the content (never of the provenance)."""
        raise NotImplementedError

    def describe(self, item) -> list[tuple[str, str]]:
        """Labelled lines that say what the input is, for reports."""
        raise NotImplementedError

    def worst_input(self) -> dict:
        """The JSON document of the most a file under 1 MB of this format can ask of the harness
        (the memory test replays each target's under a 1 GB bound; each target)."""
        raise NotImplementedError

    def owns(self, data: dict) -> bool:
        """Whether a JSON document of this target's format is this target's (formats may be
        shared, e.g. extend and decode cases, told apart by a field)."""
        return True

    # -- judging (each target) -----------------------------------------------------------------
    def check(self, item, impl: Implementation, device: str = "cpu") -> Outcome:
        """Run `impl` and the oracle on `item` and judge; never raises for the implementation's
        faults (they are divergences), always raises for the harness's own bugs."""
        raise NotImplementedError

    def shrink_candidates(self, item, divergence: Divergence) -> Iterator:
        """Smaller inputs to try, most promising first (the shrinker keeps those that fail the
        same way and are smaller by `size`)."""
        raise NotImplementedError

    def size(self, item) -> tuple:
        raise NotImplementedError

    def size_text(self, item) -> str:
        """The size in words, e.g. "12 ops", for notes on shrunk inputs."""
        raise NotImplementedError

    def summary_lines(self, features: Counter) -> list[str]:
        """Lines for the end-of-run summary from the features of every input checked."""
        return []

    def feature_names(self) -> list[str]:
        """Every name `fuzz_features` may return (atheris needs them before fuzzing starts)."""
        return []

    def fuzz_features(self, item, outcomes: list[Outcome]) -> Counter:
        """Features of one fuzzed input, with counts, for atheris to be guided by."""
        return Counter()

    def strategy(self):
        """A Hypothesis strategy of this target's inputs: the public
        `kvfuzz.<name>_<noun>s()` (each target)."""
        raise NotImplementedError

    @property
    def strategy_name(self) -> str:
        return f"{self.name}_{self.noun}s"

    # -- provided --------------------------------------------------------------------------------
    def file_name(self, item) -> str:
        return f"{self.name}-{self.input_id(item)}.json"

    def dumps(self, item) -> str:
        return json.dumps(self.to_json(item), indent=1) + "\n"

    def resolve(self, spec: str) -> Implementation:
        """A registered implementation, or an outside one whose shape `validate` accepts."""
        impl = resolve(self.name, self.implementations, spec)
        if impl not in self.implementations:
            self.validate(impl.path, impl.load())
            impl = self.declared(impl, impl.load())
        return impl

    def validate(self, path: str, obj) -> None:
        """Raise `ImplementationError` (one line) unless `obj` has the shape this target calls
        (each target)."""
        raise NotImplementedError

    def declared(self, impl: Implementation, obj) -> Implementation:
        """An outside implementation with what it declares: a class or function of the catalogue
        (an upstream one) handed over as an object keeps its entry's preconditions, so that it
        gets the inputs, and the replay line, that its import path gets. A target whose
        implementations come in more than one shape reads the rest from the shape."""
        for entry in self.implementations:
            if entry.path == impl.name:
                return replace(impl, preconditions=entry.preconditions,
                               safe_outside_contract=entry.safe_outside_contract)
        return impl

    def bundled(self) -> list[Implementation]:
        """The implementations run by default: the bundled ones whose packages are installed."""
        return [impl for impl in self.implementations
                if impl.kind == BUNDLED and impl.available()]

    def not_run_reason(self) -> str | None:
        """Why nothing runs by default (every bundled implementation needs a package that is not
        installed), or None."""
        bundled = [impl for impl in self.implementations if impl.kind == BUNDLED]
        if not bundled or any(impl.available() for impl in bundled):
            return None
        needs = sorted({impl.requires for impl in bundled})
        docs = ", ".join(f"docs/upstream-{name}.md" for name in needs)
        return (f"its implementations need {' and '.join(needs)}, which "
                f"{'is' if len(needs) == 1 else 'are'} not installed ({docs})")

    def bundled_or_error(self) -> list[Implementation]:
        """`bundled()`, or, when nothing would run (its packages are missing), the one-line
        usage error that says why: for a command or call that names this target alone."""
        impls = self.bundled()
        if not impls:
            raise ImplementationError(f"target {self.name}: not run: "
                                      f"{self.not_run_reason() or 'no implementation'}")
        return impls

    def fuzz_defaults(self) -> list[str]:
        """What `kvfuzz fuzz` runs without --impl."""
        return list(self.fuzz_implementations or [impl.name for impl in self.bundled()])

    def with_provenance(self, item, origin=None, note: str = ""):
        return replace(item, origin=origin, note=note)

    def divergence(self, item, impl: Implementation, what: str, lines: list[tuple[str, str]],
                   signature: tuple, step: int | None = None,
                   known: str | None = None) -> Divergence:
        return Divergence(self.name, impl.name, item, self.input_id(item), what, lines,
                          (self.name, impl.name, *signature), self.describe(item), self.noun,
                          step, known, implementation=impl)

    def regenerate_command(self, item, impl_name: str) -> str | None:
        origin = item.origin
        if origin is None:
            return None
        return (f"kvfuzz diff {self.name} --seed {origin.seed} --start {origin.index} --cases 1 "
                f"--impl {impl_name}")
