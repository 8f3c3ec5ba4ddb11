"""JAX's jax.nn.dot_product_attention as an attnfuzz backend (the JAX seed report).

    py:attnfuzz_py.adapters.jax_sdpa:JaxSdpa[?implementation=xla|cudnn]

implementation=xla runs wherever JAX does (the CPU here); cudnn needs a GPU build of JAX. Where
JAX is not installed, every problem is declined with that reason (skipped, visibly). Tensors
arrive as numpy views (bf16 through ml_dtypes) and go to JAX's default device; the mask is the
dense boolean mask in JAX's [B][N][T][S]; GQA is native. No LSE from the public API, backward
through jax.vjp from dO (no dLSE). The xla implementation masks with a large finite negative, so
fully masked rows average V instead of giving 0: masked_rows_zero is False (those rows are not
compared, and the report says so).

XLA does not promise bitwise-repeatable GPU results unless asked (`--xla_gpu_deterministic_ops`
in XLA_FLAGS): measured on the H200 with jax 0.11.2, the cudnn implementation's dQ differed
bitwise between two runs on identical inputs. Without the flag, implementation=cudnn declares
dQ nondeterministic (still judged against the reference every run); with it, every output must
repeat.
"""
import os

import numpy as np

from attnfuzz_py import Adapter

try:
    import jax
    import jax.numpy as jnp
    _JAX_ERROR = None
except ImportError as e:  # declined in supports(), not an import failure of the backend
    jax = jnp = None
    _JAX_ERROR = f"JAX is not installed in this Python ({e})"


def xla_deterministic():
    """Whether XLA_FLAGS asks XLA for deterministic GPU ops."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    return any(f in ("--xla_gpu_deterministic_ops", "--xla_gpu_deterministic_ops=true") for f in flags)


class JaxSdpa(Adapter):
    tensors = "numpy"
    contracts = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}
    returns_lse = False
    backward_takes_dlse = False
    masked_rows_zero = False

    def __init__(self, implementation="xla"):
        self.implementation = implementation
        self.name = f"jax.{implementation}"
        self.version = f"jax {jax.__version__}" if jax else "jax missing"
        self.device = "cpu"  # where attnfuzz's tensors are; JAX moves them to its own default device
        if implementation == "cudnn" and not xla_deterministic():
            self.nondeterministic_outputs = ("dQ",)
            self.why_nondeterministic = "XLA's GPU backward accumulates dQ in no fixed order without --xla_gpu_deterministic_ops"

    def supports(self, p):
        if _JAX_ERROR:
            return _JAX_ERROR
        if self.implementation == "cudnn" and jax.default_backend() != "gpu":
            return f"implementation=cudnn needs a GPU build of JAX (default backend here: {jax.default_backend()})"
        if p.softcap is not None:
            return "jax.nn.dot_product_attention has no softcap"
        if p.head_dim_qk != p.head_dim_v:
            return "jax.nn.dot_product_attention needs Dqk == Dv"
        return None

    def _fn(self, p):
        mask = jnp.asarray(np.ascontiguousarray(p.mask).astype(bool))

        def attend(q, k, v):  # [B][H][S][D] in, JAX's [B][S][H][D] inside
            t = lambda x: jnp.swapaxes(x, 1, 2)
            out = jax.nn.dot_product_attention(t(q), t(k), t(v), mask=mask, scale=p.scale, implementation=self.implementation)
            return t(out)
        return attend

    def forward(self, p, q, k, v):
        out = self._fn(p)(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
        return np.asarray(out), None

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        _, pullback = jax.vjp(self._fn(p), jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
        return tuple(np.asarray(g) for g in pullback(jnp.asarray(d_o)))
