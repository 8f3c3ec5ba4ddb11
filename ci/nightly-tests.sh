#!/usr/bin/env bash
# The tests CI leaves out for time (CMakePresets.json's `nightly` test preset: gtests named
# Nightly/..., ctests named nightly_...): the long no-false-alarm shards. Run beside the nightly
# campaign (ci/nightly.sh), or by hand; docs/verdicts.md ("Nightly tests") reports them.
#   ci/nightly-tests.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ci/setup.sh
cmake --preset cpu
cmake --build --preset cpu -j "$(nproc)"
ctest --preset nightly -j "$(nproc)"
