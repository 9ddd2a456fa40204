"""What `kvfuzz fuzz` can run: one atheris campaign per target (from the target table), plus
"case_loader", the JSON loaders of every format on malformed files.

A campaign needs, per target: the command of its atheris worker (`fuzz_target.py TARGET` for
every target of the table), libFuzzer flags, which implementations it accepts, byte seeds from
the JSON corpus, and `triage(path, impl_specs, stopping)`: the findings a file saved by a
failing worker shows, each minimised (while `stopping()` is false) and keyed by signature.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import kvfuzz.fuzz
from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.campaign.harness import signature_text
from kvfuzz.fuzz.engine.shrink import shrink
from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.strategies.inputs import FormatError

FUZZ_DIR = Path(kvfuzz.fuzz.__file__).resolve().parent
REPO = FUZZ_DIR.parent
ENTRY = FUZZ_DIR / "campaign" / "fuzz_target.py"  # the atheris worker of every target


def seed_inputs(target) -> list[bytes]:
    """Fuzzer inputs a campaign starts from besides the encoded corpus: long pseudo-random ones,
    decoded into inputs as rich as the seeded generator's. From an empty corpus libFuzzer spent
    thousands of inputs growing trivial ones (the detection benchmark: mutants the seeded
    generator finds at once went unfound for 20 s)."""
    return [random.Random(f"seed/{target.name}/{i}").randbytes(target.settings.seed_bytes)
            for i in range(16)]


@dataclass
class Finding:
    signature: str           # what diverged, as text; the dedup key
    headline: str
    report: str
    save: Callable[[Path], Path]   # writes the minimised input into a directory, atomically
    replay: Callable[[Path], str]  # the command that replays the saved file
    note: str = ""           # e.g. "shrunk from ..."


class DifferentialSpec:
    """A target's campaign: implementations vs the oracle on inputs decoded from bytes."""

    takes_impl = True
    output = "corpus"  # findings are corpus files, replayed by pytest from then on

    def __init__(self, target):
        self.target, self.name = target, target.name
        self.flags = target.settings.fuzz_flags
        self.command = [str(ENTRY), target.name]  # after the interpreter, before the corpus

    def check_impls(self, specs) -> None:
        for spec in specs:  # an unknown name fails here, in one line
            self.target.catalogue.resolve(spec)

    def default_impls(self) -> list[str]:
        return self.target.catalogue.fuzzed_by_default()

    def seeds(self, paths):
        """Bytes for every input of this target under `paths` that `encode` can spell, and the
        target's own seed inputs."""
        yield from seed_inputs(self.target)
        for path in corpus.input_files([p for p in paths if os.path.exists(p)]):
            try:
                target, item = corpus.load(path)
            except (FormatError, corpus.CorpusError):
                continue  # `kvfuzz replay` reports malformed files; seeding just skips them
            data = self.target.generator.encode(item) if target is self.target else None
            if data is not None:
                yield data

    def from_artifact(self, data: bytes, impl_specs=()) -> tuple[str, str]:
        """A libFuzzer crash or timeout file as the input it stands for (name, JSON), decoded
        as the workers decoded it for `impl_specs`."""
        impls = [self.target.catalogue.resolve(spec) for spec in impl_specs or self.default_impls()]
        item = self.target.generator.from_bytes(data, impls)
        return self.target.file_name(item), self.target.dumps(item)

    def triage(self, path, impl_specs, stopping, checker) -> list[Finding]:
        """Re-run a saved input on each implementation (in `checker`'s supervised worker: it may
        crash); every divergence, shrunk, is a finding."""
        target, item = corpus.load(path)
        findings = []
        for spec in impl_specs or self.default_impls():
            impl = target.catalogue.resolve(spec)
            outcome = checker.check(target, item, impl)
            if outcome.status != DIVERGE:
                continue
            small = shrink(target, outcome.divergence, stopping=stopping, check=checker.check)
            findings.append(Finding(
                signature_text(small.signature), small.headline(), small.report(),
                save=lambda directory, small=small: corpus.save(target, small.input, directory),
                replay=lambda saved, name=impl.name: f"kvfuzz replay {saved} --impl {name}",
                note=small.input.note or "not shrunk"))
        return findings


class LoaderSpec:
    """case_loader: malformed files of every format; findings are texts, kept in the work dir."""

    name = "case_loader"
    takes_impl = False
    output = "work"
    flags = ()
    command = [str(FUZZ_DIR / "campaign" / "fuzz_case_loader.py")]

    def check_impls(self, specs) -> None:
        pass

    def default_impls(self) -> list[str]:
        return ["-"]

    def seeds(self, paths):
        return iter(())

    def from_artifact(self, data: bytes, impl_specs=()) -> tuple[str, bytes]:
        from kvfuzz.fuzz.campaign.loader_fuzz import malformed

        raw = malformed(data)[1].encode("utf-8", "surrogatepass")
        return f"{self.name}-{hashlib.sha256(raw).hexdigest()[:16]}.txt", raw

    def triage(self, path, impl_specs, stopping, checker=None) -> list[Finding]:
        """A loader failure: the saved text and the exception it raises (not FormatError)."""
        from kvfuzz.fuzz.campaign.loader_fuzz import signature

        raw = Path(path).read_bytes()
        try:
            corpus.loads(raw.decode("utf-8", "surrogatepass"), str(path))
            return []
        except FormatError:
            return []
        except Exception as error:
            headline = (f"a loader raised {type(error).__name__}, not FormatError: "
                        f"{str(error)[:120]}")
            replay = (lambda saved: f"{sys.executable} -c \"import sys; from "
                      f"kvfuzz.fuzz.engine.corpus import loads; loads(open(sys.argv[1], "
                      f"'rb').read().decode('utf-8', 'surrogatepass'), 'x')\" {saved}")
            return [Finding(signature(error), headline, headline,
                            lambda directory: corpus.write_atomic(
                                Path(directory) / Path(path).name, raw),
                            replay, note=f"{len(raw)} bytes")]


class _Specs(Mapping):
    """Every campaign, read from the target table when asked (a row added later is found)."""

    def __getitem__(self, name: str):
        return LoaderSpec() if name == LoaderSpec.name else DifferentialSpec(TARGETS[name])

    def __iter__(self):
        return iter([*TARGETS, LoaderSpec.name])

    def __len__(self) -> int:
        return len(TARGETS) + 1


SPECS = _Specs()
