"""Atheris target: the JSON case loader on deliberately malformed case files.

`strategies.case.loads` / `from_json` may only ever raise CaseFormatError; any other exception
is a bug: the offending text is saved ($KVFUZZ_FOUND, default corpus/, as case_loader-<id>.txt)
and the target raises.
Run:     .venv/bin/python fuzz/targets_atheris/fuzz_case_loader.py -max_total_time=60
         (or `kvfuzz fuzz case_loader --time 10m`)
Replay:  .venv/bin/python fuzz/targets_atheris/fuzz_case_loader.py crash-<sha1>, or load the
         saved text: `.venv/bin/python -c "import sys; from strategies.case import loads;
         loads(open(sys.argv[1], encoding='utf-8', errors='surrogateescape').read())" FILE`
"""

import sys

import atheris

with atheris.instrument_imports(include=["fuzz", "strategies"]):
    from kvfuzz.fuzz.malformed_json import LoaderHarness

HARNESS = LoaderHarness("case_loader")


def TestOneInput(data: bytes) -> None:
    HARNESS.test_one_input(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
