#!/bin/bash -eu
# ClusterFuzzLite build script for kvfuzz: the same build as OSS-Fuzz's (oss-fuzz/build.sh), run
# inside base-builder-python with the repository at $SRC/kvfuzz.
exec "$SRC/kvfuzz/oss-fuzz/build.sh"
