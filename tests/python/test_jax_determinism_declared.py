#!/usr/bin/env python3
"""JaxSdpa?implementation=cudnn declares dQ nondeterministic unless XLA is asked for
deterministic GPU ops (python/attnfuzz_py/adapters/jax_sdpa.py); xla declares nothing. Runs
without JAX too: the declaration does not depend on it."""
import os
import sys

sys.path.insert(0, sys.argv[1])
from attnfuzz_py.adapters.jax_sdpa import JaxSdpa  # noqa: E402

failures = []
os.environ.pop("XLA_FLAGS", None)
if tuple(JaxSdpa("cudnn").nondeterministic_outputs) != ("dQ",):
    failures.append("cudnn without XLA_FLAGS must declare dQ")
if tuple(JaxSdpa("xla").nondeterministic_outputs):
    failures.append("xla must declare nothing")
for flag in ("--xla_gpu_deterministic_ops=true", "--xla_gpu_deterministic_ops"):
    os.environ["XLA_FLAGS"] = "--xla_dump_to=/tmp/x " + flag
    if tuple(JaxSdpa("cudnn").nondeterministic_outputs):
        failures.append(f"cudnn under {flag} must declare nothing")
os.environ["XLA_FLAGS"] = "--xla_gpu_deterministic_ops=false"
if tuple(JaxSdpa("cudnn").nondeterministic_outputs) != ("dQ",):
    failures.append("cudnn under =false must declare dQ")
for f in failures:
    print("FAIL:", f)
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
