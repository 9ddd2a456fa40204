"""Atheris target: the JSON loaders of every target's format, on deliberately malformed files.

Loading may only ever raise FormatError; any other exception is a bug: the offending text is
saved ($KVFUZZ_FOUND, default corpus/, as case_loader-<id>.txt) and the target raises.
Run:     .venv/bin/python fuzz/campaign/fuzz_case_loader.py -max_total_time=60
         (or `kvfuzz fuzz case_loader --time 10m`)
Replay:  .venv/bin/python fuzz/campaign/fuzz_case_loader.py crash-<sha1>
"""

import sys

import atheris

with atheris.instrument_imports(include=["kvfuzz.fuzz", "kvfuzz.strategies"]):
    from kvfuzz.fuzz.campaign.loader_fuzz import LoaderHarness

HARNESS = LoaderHarness()


def TestOneInput(data: bytes) -> None:
    HARNESS.test_one_input(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
