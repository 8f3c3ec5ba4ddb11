#!/usr/bin/env python3
"""What the JAX adapters declare (python/attnfuzz_py/adapters/jax_sdpa.py): implementation=cudnn
declares dQ nondeterministic unless XLA is asked for deterministic GPU ops, xla declares nothing;
cudnn has contracts and an envelope for fp16 and bf16 only (head dims multiples of 8, Dqk == Dv);
fp32 is "fp32" off the GPU. Runs without JAX too: the declarations do not depend on it."""
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
cudnn = JaxSdpa("cudnn")
if sorted(cudnn.contracts) != ["bf16", "fp16"]:
    failures.append(f"cudnn must declare fp16 and bf16 only, declares {cudnn.contracts}")
env = cudnn.envelope or {}
if env.get("dtypes") != ["fp16", "bf16"] or env.get("head_dim_multiple") != 8 or env.get("distinct_head_dims") is not False:
    failures.append(f"cudnn's envelope: {env}")
for impl in ("xla", "cudnn"):  # what supports() declines for both: campaigns aim inside it
    env = JaxSdpa(impl).envelope or {}
    if env.get("softcap") is not False or env.get("distinct_head_dims") is not False:
        failures.append(f"{impl}'s envelope must refuse softcap and Dqk != Dv: {env}")
try:
    import jax
    on_gpu = jax.default_backend() == "gpu"
except ImportError:
    on_gpu = False
for precision, fp32 in (("default", "tf32" if on_gpu else "fp32"), ("highest", "fp32")):
    got = JaxSdpa("xla", precision=precision).contracts.get("fp32")
    if got != fp32:
        failures.append(f"xla with precision={precision} must declare fp32 inputs as {fp32}, declares {got}")
for bad in ({"implementation": "pallas"}, {"precision": "high"}):
    try:
        JaxSdpa(**bad)
        failures.append(f"{bad} must be refused")
    except ValueError:
        pass
for f in failures:
    print("FAIL:", f)
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
