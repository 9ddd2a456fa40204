"""A target is a record of parts, each a small protocol of its own: its codec (JSON in and out,
content id, description), its generator (seeded and byte-fed, versioned), its catalogue
(implementations and their preconditions), its judge, its shrinker and its settings. The engine
(seeded diff, replay, campaigns, corpus tools, shrinking, summaries, reports) asks the parts,
never the target's name.

Inputs are frozen dataclasses with `origin` (an `Origin` or None) and `note` (free text)
fields; both are provenance, left out of the content id.
"""

from __future__ import annotations

import importlib
import json
import shlex
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, Protocol

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.report import Divergence
from kvfuzz.impl.registry import Implementation

# What one implementation did with one input.
AGREE, DIVERGE, OUTSIDE_CONTRACT = "agree", "diverge", "outside contract"


@dataclass
class Outcome:
    """What one implementation did with one input."""

    status: str                            # AGREE, DIVERGE or OUTSIDE_CONTRACT
    divergence: Divergence | None = None   # DIVERGE
    outside: tuple[str, ...] = ()          # OUTSIDE_CONTRACT: the contract's violations, by kind
    behaviour: str = ""                    # OUTSIDE_CONTRACT: what it did ("raised ...")
    features: Iterable[str] | Counter = field(default_factory=tuple)  # what the input exercised


class Codec(Protocol):
    """An input's JSON form; every problem of a document raises `FormatError` naming source,
    field and value."""

    format: str   # the "format" field of its files
    noun: str     # what one input is called in reports ("case", "trace")

    def from_json(self, data: dict, source: str): ...
    def to_json(self, item) -> dict: ...
    def input_id(self, item) -> str: ...              # a hash of the content, not provenance
    def describe(self, item) -> list[tuple[str, str]]: ...  # labelled lines for reports
    def owns(self, data: dict) -> bool: ...           # where targets share a format
    def worst_input(self) -> dict: ...  # the most a file under 1 MB can ask (the memory test)


class Generator(Protocol):
    """Inputs for `impls` (what they declare they support): input `index` of `seed` is the same
    forever (the generator is versioned and pinned); fuzzer bytes feed the same generator."""

    def generate(self, seed: int, index: int, impls=()): ...
    def from_bytes(self, data: bytes, impls=()): ...  # never raises
    def encode(self, item) -> bytes | None: ...       # bytes `from_bytes` turns back into item
    def seed_inputs(self) -> list[bytes]: ...         # a campaign's first inputs
    def strategy(self): ...                           # the public Hypothesis strategy
    # The detection benchmark's aimless baseline input within what `preconditions` declare
    # (an implementation's), or None where the target has none.
    def uniform(self, rng, preconditions=frozenset()): ...


class Judge(Protocol):
    """Runs an implementation and the oracle on one input; never raises for the implementation's
    faults (they are divergences, built with `target.divergence`), always for the harness's."""

    def check(self, target: "Target", item, impl: Implementation, device: str) -> Outcome: ...
    def summary_lines(self, features: Counter) -> list[str]: ...  # what the inputs exercised
    def row_lines(self, tally) -> list[str]: ...  # under an implementation's summary row
    def feature_names(self) -> list[str]: ...     # every feature atheris may be given
    def fuzz_features(self, item, outcomes: list[Outcome]) -> Counter: ...


class Shrinker(Protocol):
    """Smaller inputs to try, most promising first; the engine keeps those smaller by `size`
    that fail the same way, within `budget` (re-runs, seconds)."""

    budget: tuple[int, float]

    def candidates(self, item, divergence: Divergence) -> Iterator: ...
    def size(self, item) -> tuple: ...
    def size_text(self, item) -> str: ...  # e.g. "12 ops", for notes on shrunk inputs


@dataclass(frozen=True)
class Settings:
    """How the engine runs a target: `kvfuzz diff` without --cases, inputs per chunk handed to a
    worker (min, max), and its atheris campaigns (libFuzzer flags before the user's, the length
    of each seed input, what gets branch coverage and what is imported before)."""

    default_cases: int = 200
    chunk_sizes: tuple[int, int] = (25, 500)
    fuzz_flags: tuple[str, ...] = ()
    seed_bytes: int = 256
    coverage_packages: tuple[str, ...] = ("kvfuzz.impl",)
    coverage_modules: tuple[str, ...] = ()
    # "module:function" called with each loaded implementation where it runs, before its first
    # input is timed (what it builds on first use: SGLang's radix cache compiles a C++ extension).
    warm_up: str | None = None


def warm_up(target, loaded) -> None:
    """`target.settings.warm_up` on `loaded`; whatever it raises is left for the inputs to meet
    (the implementation's own call raises it again there, as a divergence)."""
    if target.settings.warm_up is None:
        return
    module, _, function = target.settings.warm_up.partition(":")
    try:
        getattr(importlib.import_module(module), function)(loaded)
    except Exception:  # noqa: BLE001 - reported by the inputs, where it counts
        pass


@dataclass(frozen=True)
class Target:
    name: str  # the command-line name and the corpus file prefix
    codec: Codec
    generator: Generator
    catalogue: Catalogue
    judge: Judge
    shrinker: Shrinker
    settings: Settings = Settings()
    # "module:function" of the target's live guard (`kvfuzz.guard`: fuzz/engine/guard.py), or
    # None: guard(obj, check=..., impl=..., corpus=..., **settings) -> the wrapped object.
    live: str | None = None

    # -- what takes more than one part ---------------------------------------------------------
    def check(self, item, impl: Implementation, device: str = "cpu") -> Outcome:
        return self.judge.check(self, item, impl, device)

    def divergence(self, item, impl: Implementation, what: str, lines: list[tuple[str, str]],
                   signature: tuple, step: int | None = None,
                   crash: str | None = None) -> Divergence:
        return Divergence(self.name, impl.name, item, self.codec.input_id(item), what, lines,
                          (self.name, impl.name, *signature), self.codec.describe(item),
                          self.codec.noun, step, crash=crash, implementation=impl)

    @property
    def strategy_name(self) -> str:
        """The public Hypothesis strategy's name: `kvfuzz.<name>_<noun>s()`."""
        return f"{self.name}_{self.codec.noun}s"

    def file_name(self, item) -> str:
        return f"{self.name}-{self.codec.input_id(item)}.json"

    def dumps(self, item) -> str:
        return json.dumps(self.codec.to_json(item), indent=1) + "\n"

    def profiles(self) -> tuple[str, ...]:
        """The generator's profiles, each of which `alone` runs alone (`--profile`)."""
        return getattr(self.generator, "profiles", tuple)()

    def alone(self, profile: str | None) -> "Target":
        """This target with inputs of generator profile `profile` alone (None: as it is); a
        ValueError naming the profiles where it has no such one."""
        if profile is None:
            return self
        if profile not in self.profiles():
            raise ValueError(f"{self.name} has no generator profile {profile!r}" + (
                f"; its profiles: {', '.join(self.profiles())}" if self.profiles() else ""))
        return replace(self, generator=self.generator.alone(profile))

    def regenerate_command(self, item, impl_name: str) -> str | None:
        origin = item.origin
        if origin is None:
            return None
        find = getattr(self.generator, "profile_of", None)
        profile = find(origin) if find else None
        return (f"kvfuzz diff {self.name}"
                + (f" --profile {shlex.quote(profile)}" if profile else "")
                + f" --seed {origin.seed} --start {origin.index} --cases 1 --impl {impl_name}")
