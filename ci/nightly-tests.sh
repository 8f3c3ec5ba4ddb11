#!/usr/bin/env bash
# The `nightly` test preset (CMakePresets.json: gtests named Nightly/..., which CI runs too since
# they became fast, and ctests named nightly_..., which it leaves out). Run beside the nightly
# campaign (ci/nightly.sh), or by hand; docs/verdicts.md ("Nightly tests") reports them.
#   ci/nightly-tests.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ci/setup.sh
cmake --preset cpu
cmake --build --preset cpu -j "$(nproc)"
ctest --preset nightly -j "$(nproc)"
