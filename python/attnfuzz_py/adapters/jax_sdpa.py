"""JAX attention as attnfuzz backends (the JAX seed report).

    py:attnfuzz_py.adapters.jax_sdpa:JaxSdpa[?implementation=xla|cudnn][&precision=default|highest]
    py:attnfuzz_py.adapters.jax_sdpa:JaxF32Logits[?precision=default|highest]

JaxSdpa is jax.nn.dot_product_attention. implementation=xla runs wherever JAX does; cudnn needs
a GPU build of JAX. Where JAX is not installed, every problem is declined with that reason
(skipped, visibly). Tensors arrive as numpy views (bf16 through ml_dtypes) and go to JAX's
default device; the mask is the dense boolean mask in JAX's [B][N][T][S]; GQA is native. No LSE
from the public API, backward through jax.vjp from dO (no dLSE). Both implementations mask with a
large finite negative (cuDNN: the mask becomes a bias), so fully masked rows average V instead of
giving 0: masked_rows_zero is False (those rows are not compared, and the report says so).

What each declares, and why:
- fp32 on a GPU: XLA runs float32 dots at its DEFAULT precision, which on tensor-core GPUs is
  TF32 (jax.default_matmul_precision): declared "tf32". precision=highest runs every call under
  jax.default_matmul_precision("highest") and declares "fp32". On the CPU, "fp32" either way.
- implementation=cudnn takes fp16 and bf16 only, head dims that are multiples of 8 up to 256
  (128 before Hopper), Dqk == Dv (the public API), and, because the mask reaches cuDNN as a bias,
  even Sq and Skv in training (JAX 0.10-0.11's check_is_flash_attention): the envelope declares
  the first three, supports() declines the rest with JAX's reason, before JAX is called.
- Determinism: XLA does not promise bitwise-repeatable GPU results unless asked
  (`--xla_gpu_deterministic_ops` in XLA_FLAGS): measured on the H200 with jax 0.11.2, the cudnn
  implementation's dQ differed bitwise between two runs on identical inputs. Without the flag,
  implementation=cudnn declares dQ nondeterministic (still judged against the reference every
  run); with it, every output must repeat.

JaxF32Logits is the formulation of the seed report (jax-ml/jax, "dot_product_attention has
inconsistent dot types in backward pass"): the logits dot with preferred_element_type=float32,
softmax in fp32, P rounded to the input dtype for P.V. Its backward is jax.vjp's: the logits
dot's transposes see an fp32 cotangent, so XLA runs dQ = dS.K and dK = dS^T.Q with fp32
operands (TF32 on a GPU at the default precision), where a bf16 kernel (cuDNN) rounds dS to
bf16. It declares the input dtype's contract, as jax.nn.dot_product_attention did.
"""
import os

import numpy as np

from attnfuzz_py import Adapter

# JAX preallocates 75% of the GPU's memory in every process that touches it. attnfuzz runs each
# Python backend in a process of its own, beside its own GPU oracles and other backends: on the
# H200, three JAX adapters and FlexAttention in one run failed with out-of-memory until JAX
# allocated on demand. A value the user set is kept.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

try:
    import jax
    import jax.numpy as jnp
    _JAX_ERROR = None
except ImportError as e:  # declined in supports(), not an import failure of the backend
    jax = jnp = None
    _JAX_ERROR = f"JAX is not installed in this Python ({e})"

_PRECISIONS = ("default", "highest")


def xla_deterministic():
    """Whether XLA_FLAGS asks XLA for deterministic GPU ops."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    return any(f in ("--xla_gpu_deterministic_ops", "--xla_gpu_deterministic_ops=true") for f in flags)


def _on_gpu():
    return jax is not None and jax.default_backend() == "gpu"


def _compute_capability():
    """The GPU's (major, minor), or None."""
    try:
        cc = jax.devices()[0].compute_capability  # "9.0"
        return tuple(int(x) for x in str(cc).split("."))
    except Exception:
        return None


class _JaxAttention(Adapter):
    # JAX promises jax.nn.dot_product_attention the same numerics on every implementation (the
    # seed report's resolution): its xla and cudnn paths, and the seed's formulation, are compared.
    api = "jax.nn.dot_product_attention"
    tensors = "numpy"
    returns_lse = False
    backward_takes_dlse = False
    masked_rows_zero = False

    def __init__(self, precision="default"):
        if precision not in _PRECISIONS:
            raise ValueError(f"precision={precision}: one of {', '.join(_PRECISIONS)}")
        self.precision = precision
        self.device = "cpu"  # where attnfuzz's tensors are; JAX moves them to its own default device
        # XLA's DEFAULT precision for float32 dots is TF32 on a GPU's tensor cores.
        fp32 = "tf32" if _on_gpu() and precision == "default" else "fp32"
        self.contracts = {"fp32": fp32, "fp16": "fp16", "bf16": "bf16"}
        self.version = (f"jax {jax.__version__} on {jax.default_backend()}, matmul precision {precision}" if jax else "jax missing")

    def supports(self, p):
        if _JAX_ERROR:
            return _JAX_ERROR
        if p.softcap is not None:
            return f"{self.name}: no softcap"
        if p.head_dim_qk != p.head_dim_v:
            return f"{self.name}: needs Dqk == Dv"
        return None

    def _precision(self):
        return jax.default_matmul_precision("highest" if self.precision == "highest" else None)

    def _jax_mask(self, p):
        return jnp.asarray(np.ascontiguousarray(p.mask).astype(bool))

    def forward(self, p, q, k, v):
        with self._precision():
            out = self._fn(p)(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
            return np.asarray(out), None

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        with self._precision():
            _, pullback = jax.vjp(self._fn(p), jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
            return tuple(np.asarray(g) for g in pullback(jnp.asarray(d_o)))


class JaxSdpa(_JaxAttention):
    def __init__(self, implementation="xla", precision="default"):
        if implementation not in ("xla", "cudnn"):
            raise ValueError(f"implementation={implementation}: one of xla, cudnn")
        super().__init__(precision)
        self.implementation = implementation
        self.name = f"jax.{implementation}"
        if implementation == "cudnn":
            self.contracts = {"fp16": "fp16", "bf16": "bf16"}  # check_layout: Q must be fp16/bf16 (or fp8)
            cc = _compute_capability()
            self.envelope = {"dtypes": ["fp16", "bf16"], "max_head_dim": 256 if cc and cc >= (9, 0) else 128,
                             "head_dim_multiple": 8, "distinct_head_dims": False}
            if not xla_deterministic():
                self.nondeterministic_outputs = ("dQ",)
                self.why_nondeterministic = "XLA's GPU backward accumulates dQ in no fixed order without --xla_gpu_deterministic_ops"

    def supports(self, p):
        why = super().supports(p)
        if why or self.implementation != "cudnn":
            return why
        if not _on_gpu():
            return f"implementation=cudnn needs a GPU build of JAX (default backend here: {jax.default_backend()})"
        if p.dtype not in ("fp16", "bf16"):
            return "JAX's cuDNN attention takes fp16 and bf16 only"
        h_max = self.envelope["max_head_dim"]
        if p.head_dim_qk > h_max or p.head_dim_qk % 8:
            return f"JAX's cuDNN attention needs a head dim <= {h_max} and a multiple of 8, got {p.head_dim_qk}"
        if p.seq_q % 2 or p.seq_kv % 2:
            return f"JAX's cuDNN attention with a mask (a bias) in training needs even Sq and Skv, got {p.seq_q}, {p.seq_kv}"
        return None

    def _fn(self, p):
        mask = self._jax_mask(p)

        def attend(q, k, v):  # [B][H][S][D] in, JAX's [B][S][H][D] inside
            t = lambda x: jnp.swapaxes(x, 1, 2)
            out = jax.nn.dot_product_attention(t(q), t(k), t(v), mask=mask, scale=p.scale, implementation=self.implementation)
            return t(out)
        return attend


class JaxF32Logits(_JaxAttention):
    name = "jax.f32_logits"

    def _fn(self, p):
        mask = self._jax_mask(p)
        group = p.group

        def attend(q, k, v):  # [B][H][S][D]
            if group > 1:
                k, v = jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1)
            logits = jnp.einsum("bhtd,bhsd->bhts", q, k, preferred_element_type=jnp.float32) * p.scale
            logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
            probs = jax.nn.softmax(logits, axis=-1).astype(q.dtype)
            return jnp.einsum("bhts,bhsd->bhtd", probs, v, preferred_element_type=jnp.float32).astype(q.dtype)
        return attend
