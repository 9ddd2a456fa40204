"""Deliberately malformed case files from fuzzer bytes, for the loader target.

Starts from a valid case (so the loader gets deep before it rejects), then breaks it in named
ways: a field dropped, retyped or added, a list element wrong, a number too large to parse, a
nesting too deep, the text truncated or spliced. The loader may only ever answer
`CaseFormatError`; anything else it raises is a bug, and the input is saved before re-raising.
"""

from __future__ import annotations

import hashlib
import json

from kvfuzz.strategies.paged.bytes_chooser import BytesChooser
from kvfuzz.fuzz.harness import Harness, signals_held, write_atomic
from kvfuzz.strategies.paged.build import build_decode, build_extend
from kvfuzz.strategies.paged.case import CaseFormatError, from_json, loads, to_json

DEEP, HUGE = "\x00deep\x00", "\x00huge\x00"  # placeholders replaced in the text
ODD_VALUES = (None, True, False, 1.5, -1, 0, "", "7", [], {}, [1, "x"], {"a": 1}, 2**63,
              -(2**63) - 1, float("nan"), float("inf"), DEEP, HUGE, "kvfuzz-case/1", "extend")
FIELDS = ("format", "target", "page_size", "prefix_lens", "seq_lens", "last_loc", "free_pages",
          "out_len", "origin", "note", "unknown")
VALUE_MUTATIONS = ("drop field", "set field", "set element", "grow list", "shrink list",
                   "set origin", "replace top level")
TEXT_MUTATIONS = ("none", "none", "truncate", "insert byte", "splice", "duplicate key", "bom")


def malformed(data: bytes) -> tuple[object, str]:
    """A case as a JSON value and as text, each broken in the ways `data` chooses (sometimes
    not broken at all). The value holds placeholders where the text has a deep nesting or a huge
    number, which only text can carry."""
    ch = BytesChooser(data)
    case = (build_extend if ch.choice((0, 1)) == 0 else build_decode)(ch)
    value = to_json(case)
    for _ in range(ch.integer(0, 3)):
        value = _mutate_value(ch, value)
    text = json.dumps(value)
    depth, digits = ch.integer(1, 3000), ch.integer(1, 6000)
    text = text.replace(json.dumps(DEEP), "[" * depth + "]" * depth)
    text = text.replace(json.dumps(HUGE), "9" * digits)
    return value, _mutate_text(ch, text)


def _mutate_value(ch: BytesChooser, value):
    if not isinstance(value, dict):
        return value
    value = dict(value)
    how, name = ch.choice(VALUE_MUTATIONS), ch.choice(FIELDS)
    if how == "drop field":
        value.pop(name, None)
    elif how == "set field":
        value[name] = ch.choice(ODD_VALUES)
    elif how in ("set element", "grow list", "shrink list") and isinstance(value.get(name), list):
        items = list(value[name])
        if how == "grow list":
            items.insert(ch.integer(0, len(items)), ch.choice(ODD_VALUES))
        elif items:
            at = ch.integer(0, len(items) - 1)
            items[at:at + 1] = [] if how == "shrink list" else [ch.choice(ODD_VALUES)]
        value[name] = items
    elif how == "set origin":
        value["origin"] = {key: ch.choice(ODD_VALUES) for key in ("generator", "seed", "index")
                           if ch.choice((True, True, False))}
    elif how == "replace top level":
        return ch.choice(ODD_VALUES)
    return value


def _mutate_text(ch: BytesChooser, text: str) -> str:
    how = ch.choice(TEXT_MUTATIONS)
    at = ch.integer(0, len(text))
    if how == "truncate":
        return text[:at]
    if how == "insert byte":
        return text[:at] + chr(ch.integer(0, 0x10FFFF)) + text[at:]
    if how == "splice":
        piece = bytes(ch.integer(0, 255) for _ in range(ch.integer(1, 16)))
        return text[:at] + piece.decode("utf-8", "surrogateescape") + text[at:]
    if how == "duplicate key":
        return text.replace('"page_size":', '"page_size": 0, "page_size":', 1)
    if how == "bom":
        return "\ufeff" + text
    return text


class LoaderHarness(Harness):
    """case_loader: `from_json` and `loads` may raise CaseFormatError and nothing else."""

    def test_one_input(self, data: bytes) -> None:
        value, text = malformed(data)
        for load, given in ((from_json, value), (loads, text)):
            try:
                load(given, source="fuzz input")
                self.counts[f"{load.__name__} accepted"] += 1
            except CaseFormatError:
                self.counts[f"{load.__name__} rejected"] += 1
            except Exception as error:
                self._failed(load.__name__, text, error)
        self.done_one()

    def _failed(self, loader: str, text: str, error: Exception) -> None:
        signature = json.dumps(["case_loader", type(error).__name__])  # as triage_loader
        if not self.failed(signature):
            return
        raw = text.encode("utf-8", "surrogatepass")
        name = f"case_loader-{hashlib.sha256(raw).hexdigest()[:16]}.txt"
        self.found_dir.mkdir(parents=True, exist_ok=True)
        with signals_held():
            write_atomic(self.found_dir / name, raw)
        raise AssertionError(f"{loader} raised {type(error).__name__}, not CaseFormatError, "
                             f"on input saved as {self.found_dir / name}") from error
