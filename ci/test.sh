#!/usr/bin/env bash
# The test command: set up, build the fuzz and cpu presets, run the `fuzz` and `cpu` ctest labels.
# GPU tests (label `gpu`) run on a GPU machine: cmake --preset gpu && ctest --preset gpu.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)
ci/setup.sh
cmake --preset fuzz
cmake --build --preset fuzz -j "$jobs"
ctest --preset fuzz
cmake --preset cpu
cmake --build --preset cpu -j "$jobs"
ctest --preset cpu -j "$jobs"
