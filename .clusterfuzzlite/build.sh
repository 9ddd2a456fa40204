#!/bin/bash -eu
# ClusterFuzzLite build script for kvfuzz (same as oss-fuzz/build.sh) (Python, atheris). Runs inside base-builder-python with the
# repository at $SRC/kvfuzz; writes one fuzzer binary and one seed corpus zip per target to $OUT.
cd "$SRC/kvfuzz"

# CPU torch only: the pin matches pyproject.toml, and any other torch request pulls CUDA builds.
pip3 install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
pip3 install --no-deps "numpy>=1.26" "hypothesis==6.170.17"
pip3 install --no-deps .

# Implementations are imported by name at run time (impl/registry.py), which PyInstaller cannot
# see: collect our packages whole.
for fuzzer in fuzz/targets_atheris/fuzz_*.py; do
  compile_python_fuzzer "$fuzzer" \
    --collect-submodules impl --collect-submodules oracle \
    --collect-submodules strategies --collect-submodules fuzz
done

# <fuzzer>_seed_corpus.zip from the committed JSON corpus (decoded cases, encoded to bytes).
python3 -m fuzz.seed_corpus --out "$OUT" corpus/
