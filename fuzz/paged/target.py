"""The paged targets "extend" and "decode": one `alloc_extend` / `alloc_decode` call per case,
judged slot by slot against the oracle (`check.py`). Both share the `Case` type and its format,
told apart by the case's "target" field."""

from __future__ import annotations

import functools
from collections import Counter

from kvfuzz.fuzz.paged import features, shrink
from kvfuzz.fuzz.summary import grid
from kvfuzz.fuzz.target import Target
from kvfuzz.impl.paged import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.paged import bytes_chooser, case as codec, generators
from kvfuzz.strategies.paged.edges import CLASSES


class PagedTarget(Target):
    format = codec.FORMAT
    default_cases = 2000

    def __init__(self, name: str):
        self.name = name
        self.implementations = tuple(i for i in IMPLEMENTATIONS if i.target == name)

    def generate(self, seed, index):
        return generators.generate(self.name, seed, index)

    def from_bytes(self, data):
        return bytes_chooser.decode(data, self.name)

    def encode(self, item):
        return bytes_chooser.encode(item)

    def strategy(self):
        """Cases inside the contract, steered to the edge classes (page-aligned lengths, empty
        and tight pools, zero extends, ...)."""
        from kvfuzz.strategies.paged import hypothesis_cases  # imports hypothesis

        return getattr(hypothesis_cases, f"{self.name}_cases")()

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

    def validate(self, path, obj):
        if self.name == "extend":
            what = ("alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, "
                    "page_size, device)")
        else:
            what = ("alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size, "
                    "num_new_pages)")
        check_shape(path, obj, 7 if self.name == "extend" else 6, f"a function {what}")

    def check(self, item, impl, device="cpu"):
        return _checker()(self, item, impl, device)

    def shrink_candidates(self, item, divergence):
        return shrink.candidates(item)

    def size(self, item):
        return shrink.size(item)

    def size_text(self, item):
        return f"{item.batch_size} requests, {len(item.free_pages)} free pages"

    def summary_lines(self, found: Counter) -> list[str]:
        classes = CLASSES[self.name]
        missing = [name for name in classes if not found[name]]
        lines = [f"  edge classes hit ({len(classes) - len(missing)}/{len(classes)}):"]
        lines += grid([f"{name} {found[name]:,}" for name in classes])
        if missing:
            lines.append(f"  NEVER HIT: {', '.join(missing)}")
        return lines

    def feature_names(self):
        return features.feature_names(self.name)

    def fuzz_features(self, item, outcomes):
        return features.fuzz_features(item, outcomes)


@functools.cache
def _checker():
    from kvfuzz.fuzz.paged.check import check  # imports torch: not before a case runs
    return check


EXTEND = PagedTarget("extend")
DECODE = PagedTarget("decode")
