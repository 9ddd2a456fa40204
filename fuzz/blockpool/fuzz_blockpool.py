"""Atheris target: block pools (vLLM `BlockPool`'s interface) vs the oracle, in lock step, on
traces decoded from bytes.

Run:     .venv/bin/python fuzz/blockpool/fuzz_blockpool.py [BYTES_CORPUS_DIR] -max_total_time=60
         (better: `kvfuzz fuzz blockpool --time 10m`: seeds, parallel workers, shrinking, dedup);
         KVFUZZ_IMPL=NAME,module:attr picks implementations (docs/fuzzing.md).
Replay:  a divergence is saved as JSON first ($KVFUZZ_FOUND, default corpus/), then raised:
         `kvfuzz replay corpus/blockpool-<id>.json --impl NAME`.
"""

import sys

import atheris

from kvfuzz.fuzz.atheris_env import harness_for

HARNESS = harness_for(atheris, "blockpool")


def TestOneInput(data: bytes) -> None:
    HARNESS.test_one_input(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
