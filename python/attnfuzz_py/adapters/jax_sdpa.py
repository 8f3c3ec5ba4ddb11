"""JAX attention as attnfuzz backends (the JAX seed report).

    py:attnfuzz_py.adapters.jax_sdpa:JaxSdpa[?implementation=xla|cudnn][&precision=default|highest]
    py:attnfuzz_py.adapters.jax_sdpa:JaxF32Logits[?precision=default|highest]

JaxSdpa is jax.nn.dot_product_attention. implementation=xla runs wherever JAX does; cudnn needs
a GPU build of JAX. Where JAX is not installed, every problem is declined with that reason
(skipped, visibly). Tensors arrive as numpy views (bf16 through ml_dtypes) and go to JAX's
default device; the mask is the dense boolean mask in JAX's [B][N][T][S]; a score bias is JAX's
`bias` argument, in its broadcast shape (4-D, broadcastable to [B][N][T][S]: the harness's
[B|1][Hq|1][Sq|1][Skv|1]), added to the scaled logits before the mask; GQA is native. No LSE
from the public API, backward through jax.vjp from dO (no dLSE). Both implementations mask with a
large finite negative (cuDNN: the mask becomes a bias), so fully masked rows average V instead of
giving 0: masked_rows_zero is False (those rows are not compared, and the report says so).

What each declares, and why:
- fp32 on a GPU: XLA runs float32 dots at its DEFAULT precision, which on tensor-core GPUs is
  TF32 (jax.default_matmul_precision): declared "tf32". precision=highest runs every call under
  jax.default_matmul_precision("highest") and declares "fp32". On the CPU, "fp32" either way.
- A score bias: xla and JaxF32Logits declare it (envelope "bias"); implementation=cudnn does
  not (its bias path has not run: CI's JAX has no GPU), so attnfuzz refuses it a biased call.
  dBias (envelope "bias_grad", the same two): jax.vjp with respect to the bias argument too, on
  the padded bias (its dimensions of extent 1 kept, so JAX's broadcast sums them), the padding
  dropped after.
- implementation=cudnn takes fp16 and bf16 only, head dims that are multiples of 8 up to 256
  (128 before Hopper) and Dqk == Dv (the public API): the envelope declares them, supports()
  declines the rest with JAX's reason, before JAX is called. Because the mask reaches cuDNN as a
  bias, JAX 0.10-0.11 also wants even Sq and Skv in training (check_is_flash_attention): the
  bucketed lengths below always are.
- Determinism: XLA does not promise bitwise-repeatable GPU results unless asked
  (`--xla_gpu_deterministic_ops` in XLA_FLAGS): measured on the H200 with jax 0.11.2, the cudnn
  implementation's dQ differed bitwise between two runs on identical inputs. Without the flag,
  implementation=cudnn declares dQ nondeterministic (still judged against the reference every
  run); with it, every output must repeat.

Shapes: every call runs on bucketed shapes, jitted on a GPU, so that a campaign compiles a few programs
(XLA compiles each new shape, forward and backward, in seconds: on the H200 about 9 s for the
first real-size case) and JAX's persistent cache (JAX_COMPILATION_CACHE_DIR, which campaigns set
under their directory) keeps them across workers and --resume:
- B, Hkv and the GQA group G padded to powers of two, Sq and Skv to 32, 128, 512, 2048, ... (the
  smallest >= S), all padding zero (a bias's dimensions of extent 1 stay 1). Padded keys are
  masked for every query; padded queries see no key, their dO is zero, and so is what they add
  to dK and dV; padded batches and heads are zero. The padded results are dropped.
- xla: Dqk and Dv padded with zero columns to the next power of two >= 16 (zero columns add exact
  zeros to every dot product; the scale is the call's own, given explicitly). cudnn: head dims as
  they are (cuDNN's kernels differ per head dim, and there are seven).
What this does not test of JAX: its handling of other sequence lengths, batch and head counts
(the padded calls are what runs), and, for xla, head dims that are not powers of two.

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
from attnfuzz_py.adapters.buckets import bucket

# JAX preallocates 75% of the GPU's memory in every process that touches it. attnfuzz runs each
# Python backend in a process of its own, beside its own GPU oracles and other backends: on the
# H200, three JAX adapters and FlexAttention in one run failed with out-of-memory until JAX
# allocated on demand. A value the user set is kept.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# JAX's persistent cache keeps only programs that took a second or more to compile: the rest
# were compiled again in every campaign worker. A value the user set is kept.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

try:
    import jax
    import jax.numpy as jnp
    _JAX_ERROR = None
except ImportError as e:  # declined in supports(), not an import failure of the backend
    jax = jnp = None
    _JAX_ERROR = f"JAX is not installed in this Python ({e})"

_PRECISIONS = ("default", "highest")


class _Padded:
    """One problem on bucketed shapes (the module's docstring), and the numpy copies in and out."""

    def __init__(self, p, pad_head_dims):
        self.p = p
        self.b, self.hkv, self.g = bucket(p.batch, 1), bucket(p.heads_kv, 1), bucket(p.group, 1)
        self.sq, self.skv = bucket(p.seq_q, 32, 4), bucket(p.seq_kv, 32, 4)
        self.dqk = bucket(p.head_dim_qk, 16) if pad_head_dims else p.head_dim_qk
        self.dv = bucket(p.head_dim_v, 16) if pad_head_dims else p.head_dim_v

    def queries(self, x, d):
        """[B][Hq][Sq][D] -> [B'][Hkv' * G'][Sq'][d]: query head h of kv head h // G keeps its place in its group."""
        p = self.p
        out = np.zeros((self.b, self.hkv, self.g, self.sq, d), dtype=x.dtype)
        out[:p.batch, :p.heads_kv, :p.group, :p.seq_q, :x.shape[-1]] = x.reshape(p.batch, p.heads_kv, p.group, p.seq_q, -1)
        return out.reshape(self.b, self.hkv * self.g, self.sq, d)

    def keys(self, x, d):
        """[B][Hkv][Skv][D] -> [B'][Hkv'][Skv'][d]."""
        p = self.p
        out = np.zeros((self.b, self.hkv, self.skv, d), dtype=x.dtype)
        out[:p.batch, :p.heads_kv, :p.seq_kv, :x.shape[-1]] = x
        return out

    def mask(self):
        """The dense mask on the padded problem: padded keys and padded queries see nothing."""
        p = self.p
        out = np.zeros((self.b, self.hkv, self.g, self.sq, self.skv), dtype=bool)
        out[:p.batch, :p.heads_kv, :p.group, :p.seq_q, :p.seq_kv] = \
            np.asarray(p.mask).reshape(p.batch, p.heads_kv, p.group, p.seq_q, p.seq_kv) != 0
        return out.reshape(self.b, self.hkv * self.g, self.sq, self.skv)

    def bias(self, x):
        """The score bias [B|1][Hq|1][Sq|1][Skv|1] on the padded problem: its dimensions of
        extent 1 kept (JAX broadcasts them), zeros in the padding, query head h of kv head h // G
        at its place in its group (as queries())."""
        p = self.p
        nb, nh, nq, nkv = x.shape
        b, sq, skv = (self.b if nb > 1 else 1), (self.sq if nq > 1 else 1), (self.skv if nkv > 1 else 1)
        if nh == 1:
            out = np.zeros((b, 1, sq, skv), dtype=x.dtype)
            out[:nb, :, :nq, :nkv] = x
            return out
        out = np.zeros((b, self.hkv, self.g, sq, skv), dtype=x.dtype)
        out[:nb, :p.heads_kv, :p.group, :nq, :nkv] = x.reshape(nb, p.heads_kv, p.group, nq, nkv)
        return out.reshape(b, self.hkv * self.g, sq, skv)

    def of_bias(self, y, shape):
        """The padded bias's gradient back to the bias's shape [B|1][Hq|1][Sq|1][Skv|1] (bias()'s inverse)."""
        p = self.p
        nb, nh, nq, nkv = shape
        y = np.asarray(y)
        if nh > 1:
            y = y.reshape(y.shape[0], self.hkv, self.g, *y.shape[2:])[:, :p.heads_kv, :p.group].reshape(y.shape[0], nh, *y.shape[2:])
        return np.ascontiguousarray(y[:nb, :, :nq, :nkv])

    def of_queries(self, y, d):
        """[B'][Hq'][Sq'][D'] -> [B][Hq][Sq][d]."""
        p = self.p
        y = np.asarray(y).reshape(self.b, self.hkv, self.g, self.sq, -1)[:p.batch, :p.heads_kv, :p.group, :p.seq_q, :d]
        return np.ascontiguousarray(y.reshape(p.batch, p.heads_q, p.seq_q, d))

    def of_keys(self, y, d):
        """[B'][Hkv'][Skv'][D'] -> [B][Hkv][Skv][d]."""
        p = self.p
        return np.ascontiguousarray(np.asarray(y)[:p.batch, :p.heads_kv, :p.seq_kv, :d])


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
    # What supports() declines, so that campaigns aim inside it: jax.nn.dot_product_attention
    # takes no softcap and one head dim for Q, K and V. Its `bias` takes the score bias.
    envelope = {"distinct_head_dims": False, "softcap": False, "bias": True, "bias_grad": True}

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

    pad_head_dims = True

    def _precision(self):
        return jax.default_matmul_precision("highest" if self.precision == "highest" else None)

    # The softmax scale as an fp32 argument of the jitted programs, not a constant of them: the
    # scale is D^-0.5 of the real head dim (or one of the generator's random scales), so as a
    # constant it made a program per head dim and scale inside one padded shape. Both the xla
    # path and the seed's formulation multiply the fp32 logits by the scale rounded to fp32, so
    # a traced fp32 scalar is the same product. cuDNN's fused kernel takes it as a constant.
    traced_scale = True

    def _jitted(self, scale):
        """(forward, backward), jitted once (per scale where the scale is a constant): jit's cache
        then keys the compiled programs on the padded shapes and dtype alone (and the bias's, or
        its absence). Both take (q, k, v, mask, bias or None), then the scale (ignored where it is a
        constant), then the backward dO; the third, the backward that returns dBias as well."""
        cache = self.__dict__.setdefault("_jit_cache", {})
        key = None if self.traced_scale else scale
        if key not in cache:
            def attend(q, k, v, mask, bias, s):
                return self._attend(s if self.traced_scale else scale)(q, k, v, mask, bias)

            def backward(q, k, v, mask, bias, s, d_o):
                _, pullback = jax.vjp(lambda q_, k_, v_: attend(q_, k_, v_, mask, bias, s), q, k, v)
                return pullback(d_o)

            def backward_with_bias(q, k, v, mask, bias, s, d_o):  # dQ, dK, dV, dBias
                _, pullback = jax.vjp(lambda q_, k_, v_, b_: attend(q_, k_, v_, mask, b_, s), q, k, v, bias)
                return pullback(d_o)
            # On the CPU op by op, as JAX runs eagerly: XLA's CPU compiler takes no fp16 dot with an
            # fp32 result inside a jitted program (dot_product_attention's xla path), and the CPU
            # compiles in milliseconds anyway.
            functions = (attend, backward, backward_with_bias)
            cache[key] = tuple(jax.jit(f) for f in functions) if _on_gpu() else functions
        return cache[key]

    def _padded_inputs(self, p, q, k, v):
        pad = _Padded(p, self.pad_head_dims)
        bias = None if p.bias is None else jnp.asarray(pad.bias(p.bias))
        return pad, [jnp.asarray(x) for x in (pad.queries(q, pad.dqk), pad.keys(k, pad.dqk), pad.keys(v, pad.dv), pad.mask())] + [bias]

    def forward(self, p, q, k, v):
        pad, args = self._padded_inputs(p, q, k, v)
        with self._precision():
            out = self._jitted(float(p.scale))[0](*args, jnp.float32(p.scale))
        return pad.of_queries(out, p.head_dim_v), None

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        pad, args = self._padded_inputs(p, q, k, v)
        with self._precision():
            run = self._jitted(float(p.scale))[2 if p.bias_requires_grad else 1]
            grads = run(*args, jnp.float32(p.scale), jnp.asarray(pad.queries(d_o, pad.dv)))
        dq, dk, dv = grads[:3]
        out = (pad.of_queries(dq, p.head_dim_qk), pad.of_keys(dk, p.head_dim_qk), pad.of_keys(dv, p.head_dim_v))
        return out + (pad.of_bias(grads[3], p.bias.shape),) if p.bias_requires_grad else out


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
                             "head_dim_multiple": 8, "distinct_head_dims": False, "softcap": False}
            self.pad_head_dims = False  # cuDNN's kernels differ per head dim: each is tested as it is
            self.traced_scale = False  # an attribute of cuDNN's fused call
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
        return None

    def _attend(self, scale):
        implementation = self.implementation

        def attend(q, k, v, mask, bias):  # [B][H][S][D], [B][Hq][Sq][Skv] in, JAX's [B][S][H][D] inside
            t = lambda x: jnp.swapaxes(x, 1, 2)
            out = jax.nn.dot_product_attention(t(q), t(k), t(v), bias=bias, mask=mask, scale=scale,
                                               implementation=implementation)
            return t(out)
        return attend


class JaxF32Logits(_JaxAttention):
    name = "jax.f32_logits"

    def _attend(self, scale):
        def attend(q, k, v, mask, bias):  # [B][H][S][D], [B][Hq][Sq][Skv], the bias [B|1][Hq|1][Sq|1][Skv|1]
            group = q.shape[1] // k.shape[1]
            if group > 1:
                k, v = jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1)
            logits = jnp.einsum("bhtd,bhsd->bhts", q, k, preferred_element_type=jnp.float32) * scale
            if bias is not None:
                logits = logits + bias.astype(jnp.float32)
            logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
            probs = jax.nn.softmax(logits, axis=-1).astype(q.dtype)
            return jnp.einsum("bhts,bhsd->bhtd", probs, v, preferred_element_type=jnp.float32).astype(q.dtype)
        return attend
