"""The paged targets "extend" and "decode": one `alloc_extend` / `alloc_decode` call per case,
judged slot by slot against the oracle (`check.py`). Both share the `Case` type and its format,
told apart by the case's "target" field."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.summary import grid
from kvfuzz.fuzz.engine.target import Settings, Target
from kvfuzz.fuzz.paged import features, shrink
from kvfuzz.impl.paged import DECLARABLE, IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.paged import bytes_chooser, case as codec, generators
from kvfuzz.strategies.paged.edges import CLASSES

SIGNATURES = {
    "extend": (7, "alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, "
                  "page_size, device)"),
    "decode": (6, "alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size, "
                  "num_new_pages)"),
}


@dataclass(frozen=True)
class PagedCodec:
    name: str
    format = codec.FORMAT
    noun = "case"

    def from_json(self, data, source):
        return codec.from_json(data, source)

    def to_json(self, item):
        return codec.to_json(item)

    def input_id(self, item):
        return item.case_id()

    def worst_input(self):
        return codec.worst_input(self.name)

    def owns(self, data):
        return data.get("target") == self.name

    def describe(self, item):
        return [("batch", f"{item.batch_size} requests, page_size {item.page_size}, "
                          f"{len(item.free_pages)} free pages, output length "
                          f"{item.output_length()}")]


@dataclass(frozen=True)
class PagedGenerator:
    name: str

    def generate(self, seed, index, impls=()):
        return generators.generate(self.name, seed, index)

    def from_bytes(self, data, impls=()):
        return bytes_chooser.decode(data, self.name)

    def encode(self, item):
        return bytes_chooser.encode(item)

    def strategy(self):
        """Cases inside the contract, steered to the edge classes (page-aligned lengths, empty
        and tight pools, zero extends, ...)."""
        from kvfuzz.strategies.paged import hypothesis_cases  # imports hypothesis

        return getattr(hypothesis_cases, f"{self.name}_cases")()

    def uniform(self, rng, preconditions=frozenset()):  # cases make no misuse: any admit them
        from kvfuzz.strategies.paged.uniform import uniform_case

        return uniform_case(self.name, rng)


@dataclass(frozen=True)
class PagedJudge:
    name: str

    def check(self, target, item, impl, device="cpu"):
        return _checker()(target, item, impl, device)

    def summary_lines(self, found: Counter) -> list[str]:
        classes = CLASSES[self.name]
        missing = [name for name in classes if not found[name]]
        lines = [f"  edge classes hit ({len(classes) - len(missing)}/{len(classes)}):"]
        lines += grid([f"{name} {found[name]:,}" for name in classes])
        if missing:
            lines.append(f"  NEVER HIT: {', '.join(missing)}")
        return lines

    def row_lines(self, tally):
        return []

    def feature_names(self):
        return features.feature_names(self.name)

    def fuzz_features(self, item, outcomes):
        return features.fuzz_features(item, outcomes)


class PagedShrinker:
    budget = (3000, 30.0)
    candidates = staticmethod(lambda item, divergence: shrink.candidates(item))
    size = staticmethod(shrink.size)

    @staticmethod
    def size_text(item):
        return f"{item.batch_size} requests, {len(item.free_pages)} free pages"


@functools.cache
def _checker():
    from kvfuzz.fuzz.paged.check import check  # imports torch: not before a case runs
    return check


def paged_target(name: str) -> Target:
    positional, what = SIGNATURES[name]
    def shape(path, obj):
        check_shape(path, obj, positional, f"a function {what}")
    catalogue = Catalogue(name, tuple(i for i in IMPLEMENTATIONS if i.target == name), shape,
                          declarable=DECLARABLE)
    return Target(name, PagedCodec(name), PagedGenerator(name), catalogue, PagedJudge(name),
                  PagedShrinker(), Settings(default_cases=2000))


EXTEND = paged_target("extend")
DECODE = paged_target("decode")
