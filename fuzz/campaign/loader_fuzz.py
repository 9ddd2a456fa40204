"""Deliberately malformed input files from fuzzer bytes, for the "case_loader" atheris target:
the JSON loaders of every target's format may raise `FormatError` and nothing else.

Starts from a valid input of a target the bytes choose (so a loader gets deep before it rejects),
then breaks it: a field anywhere in the document dropped, retyped or added, a list element wrong,
a number too large to parse, a nesting too deep, the text truncated or spliced. Anything but
`FormatError` is a bug: the text is saved before the target raises.
"""

from __future__ import annotations

import hashlib
import json

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.campaign.harness import Harness
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.paged.bytes_chooser import BytesChooser

NAME = "case_loader"
DEEP, HUGE = "\x00deep\x00", "\x00huge\x00"  # placeholders replaced in the text
ODD_VALUES = (None, True, False, 1.5, -1, 0, "", "7", [], {}, [1, "x"], {"a": 1}, 2**63,
              -(2**63) - 1, float("nan"), float("inf"), DEEP, HUGE, "kvfuzz-case/1", "extend",
              "unknown")
VALUE_MUTATIONS = ("drop", "set", "insert", "add field", "replace top level")
TEXT_MUTATIONS = ("none", "none", "truncate", "insert byte", "splice", "duplicate key", "bom")
MAX_INPUT_BYTES = 400


def malformed(data: bytes) -> tuple[object, str]:
    """An input as a JSON value and as text, each broken in the ways `data` chooses (sometimes
    not broken at all). The value holds placeholders where the text has a deep nesting or a huge
    number, which only text can carry."""
    ch = BytesChooser(data)
    target = TARGETS[ch.choice(list(TARGETS))]
    item = target.generator.from_bytes(ch.take(ch.integer(0, MAX_INPUT_BYTES)))
    value = target.codec.to_json(item)
    for _ in range(ch.integer(0, 3)):
        value = _mutate_value(ch, value)
    text = json.dumps(value)
    depth, digits = ch.integer(1, 3000), ch.integer(1, 6000)
    text = text.replace(json.dumps(DEEP), "[" * depth + "]" * depth)
    text = text.replace(json.dumps(HUGE), "9" * digits)
    return value, _mutate_text(ch, text)


def _places(value, found: list) -> list:
    """Every (container, key) in a JSON value, depth first."""
    if isinstance(value, dict):
        for key in list(value):
            found.append((value, key))
            _places(value[key], found)
    elif isinstance(value, list):
        for index in range(len(value)):
            found.append((value, index))
            _places(value[index], found)
    return found


def _mutate_value(ch: BytesChooser, value):
    how = ch.choice(VALUE_MUTATIONS)
    value = json.loads(json.dumps(value))  # a private copy to break
    places = _places(value, [])
    if how == "replace top level" or not places:
        return ch.choice(ODD_VALUES)
    container, key = ch.choice(places)
    if how == "drop":
        del container[key]
    elif how == "set":
        container[key] = ch.choice(ODD_VALUES)
    elif how == "insert" and isinstance(container, list):
        container.insert(key, ch.choice(ODD_VALUES))
    elif isinstance(container, dict):  # add field
        container[ch.choice(("unknown", "op", "format", "n", "origin"))] = ch.choice(ODD_VALUES)
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
        return text.replace('"format":', '"format": 0, "format":', 1)
    if how == "bom":
        return "\ufeff" + text
    return text


class LoaderHarness(Harness):
    """Every loader may raise `FormatError` and nothing else, on any value or text."""

    def __init__(self):
        super().__init__(NAME)

    def test_one_input(self, data: bytes) -> None:
        value, text = malformed(data)
        for name, load, given in (("from_document", corpus.from_document, value),
                                  ("loads", corpus.loads, text)):
            try:
                load(given, "fuzz input")
                self.counts[f"{name} accepted"] += 1
            except FormatError:
                self.counts[f"{name} rejected"] += 1
            except Exception as error:
                self._failed(name, text, error)
        self.done_one()

    def _failed(self, loader: str, text: str, error: Exception) -> None:
        if not self.failed(signature(error)):
            return
        raw = text.encode("utf-8", "surrogatepass")
        path = self.found_dir / f"{NAME}-{hashlib.sha256(raw).hexdigest()[:16]}.txt"
        corpus.write_atomic(path, raw)
        raise AssertionError(f"{loader} raised {type(error).__name__}, not FormatError, "
                             f"on input saved as {path}") from error


def signature(error: Exception) -> str:
    return json.dumps([NAME, type(error).__name__])
