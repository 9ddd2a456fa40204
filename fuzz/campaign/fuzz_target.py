"""Atheris target for every target of the table: its implementations vs its oracle, on inputs
decoded from the fuzzer's bytes (`kvfuzz fuzz TARGET` runs it in parallel workers, with seeds,
shrinking and dedup; docs/fuzzing.md).

Run:     .venv/bin/python fuzz/campaign/fuzz_target.py TARGET [BYTES_CORPUS_DIR] -max_total_time=60
         KVFUZZ_IMPL=NAME,module:attr picks implementations.
Replay:  a divergence is saved as JSON first ($KVFUZZ_FOUND, default corpus/), then raised:
         `kvfuzz replay corpus/TARGET-<id>.json --impl NAME`; a crash file: pass it after TARGET.
"""

import sys

from kvfuzz.fuzz.campaign.atheris_env import fuzz

if __name__ == "__main__":
    fuzz(sys.argv[1] if len(sys.argv) > 1 else "", [sys.argv[0], *sys.argv[2:]])
