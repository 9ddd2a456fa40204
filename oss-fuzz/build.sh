#!/bin/bash -eu
# OSS-Fuzz build script for kvfuzz (Python, atheris). Runs inside base-builder-python with the
# repository at $SRC/kvfuzz; writes one fuzzer binary and one seed corpus zip per target to $OUT.
# ClusterFuzzLite runs this same script (.clusterfuzzlite/build.sh).
cd "$SRC/kvfuzz"

# CPU torch only: the pin matches pyproject.toml, and any other torch request pulls CUDA builds.
pip3 install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
pip3 install --no-deps "numpy>=1.26" "hypothesis==6.170.17"
pip3 install --no-deps .

# Implementations are imported by name at run time (kvfuzz/impl/registry.py), which PyInstaller
# cannot see: collect the whole installed package.
# One fuzzer per target of the table (fuzz/targets.py), each a three-line script around the
# generic entry (fuzz/campaign/fuzz_target.py), plus the loader target.
mkdir -p "$SRC/fuzzers"
for target in $(python3 -c "from kvfuzz.fuzz.targets import TARGETS; print(*TARGETS)"); do
  printf 'import sys\nfrom kvfuzz.fuzz.campaign.atheris_env import fuzz\nfuzz("%s", sys.argv)\n' \
      "$target" > "$SRC/fuzzers/fuzz_$target.py"
  compile_python_fuzzer "$SRC/fuzzers/fuzz_$target.py" --collect-submodules kvfuzz
done
compile_python_fuzzer fuzz/campaign/fuzz_case_loader.py --collect-submodules kvfuzz

# <fuzzer>_seed_corpus.zip from the committed JSON corpus (decoded cases, encoded to bytes).
python3 -m kvfuzz.fuzz.campaign.seed_corpus --out "$OUT" corpus/
