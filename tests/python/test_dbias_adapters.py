"""dBias from each shipped adapter that declares it (envelope "bias_grad"), without the binary: on
small random problems, against a float64 torch autograd computation of the same attention with a
leaf bias of the bias's broadcast shape. dBias is dS summed over the dimensions the bias
broadcasts, dS taken before any softcap chain factor (the bias comes after the softcap), so the
shapes include broadcasts over B, H, Sq and Skv, all four and none, and softcapped problems.

    PYTHONPATH=python .deps/pyenv/bin/python -m pytest tests/python/test_dbias_adapters.py

What runs here is the CPU: Minimal, Sdpa?kernel=math (fp32, fp16, bf16), FlexEager, the bucketed
backward of FlexCompiled (flex_buckets.backward) through eager flex_attention, the JAX xla path
and JaxF32Logits, and @attnfuzz_py.kernel (autograd and an own backward). Also what the adapters
that cannot give dBias here declare: SDPA's CPU flash kernel refuses a mask that requires grad
(torch 2.11), so Sdpa?kernel=flash does not declare it.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attnfuzz_py  # noqa: E402
from attnfuzz_py import Problem  # noqa: E402
from attnfuzz_py.adapters.minimal import Minimal  # noqa: E402
from attnfuzz_py.adapters.sdpa import Sdpa  # noqa: E402

B, HQ, HKV, SQ, SKV, DQK, DV = 2, 4, 2, 6, 9, 8, 8
# Which of (B, Hq, Sq, Skv) the bias spans; extent 1 (broadcast) elsewhere.
SPANS = [(1, 1, 1, 1), (0, 1, 1, 1), (1, 0, 0, 1), (0, 0, 1, 0), (0, 0, 0, 0), (1, 1, 0, 1)]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make(spans, softcap=None, dtype="fp32", seed=0, dv=DV, with_dlse=True):
    """A problem that asks for dBias, its inputs in the case dtype (values exact there) and the
    float64 autograd reference: (p, q, k, v, d_o, d_lse, want), want = (dQ, dK, dV, dBias)."""
    rng = np.random.default_rng(seed)
    mask = (rng.random((B, HQ, SQ, SKV)) < 0.7).astype(np.uint8)
    mask[..., 0] = 1  # every row sees a key (fully masked rows are not what this tests)
    shape = tuple(n if span else 1 for n, span in zip((B, HQ, SQ, SKV), spans))
    t = DTYPES[dtype]

    def rand(*s, sigma=1.0):
        return torch.from_numpy(rng.normal(0.0, sigma, s)).to(t)

    q, k, v = rand(B, HQ, SQ, DQK), rand(B, HKV, SKV, DQK), rand(B, HKV, SKV, dv)
    bias, d_o = rand(*shape, sigma=2.0), rand(B, HQ, SQ, dv)
    d_lse = rand(B, HQ, SQ, sigma=0.5).float() if with_dlse else torch.zeros(B, HQ, SQ)
    fields = dict(batch=B, heads_q=HQ, heads_kv=HKV, seq_q=SQ, seq_kv=SKV, head_dim_qk=DQK, head_dim_v=dv, dtype=dtype,
                  scale=DQK ** -0.5, softcap=softcap, mask={"kind": "random", "density": 0.7, "seed": 1}, q_offset=0,
                  kv_offset=0, full_seq_q=SQ, full_seq_kv=SKV, restrictions=[], bias_requires_grad=True)
    p = Problem(fields, mask, bias)
    return p, q, k, v, d_o, d_lse, reference(p, q, k, v, bias, d_o, d_lse)


def reference(p, q, k, v, bias, d_o, d_lse):
    """(dQ, dK, dV, dBias) in float64 by autograd (S = softcap(scale q.k) + bias, the mask, softmax),
    and the scale of each: its largest element, and for dBias the largest sum of |dS| over the
    elements it adds up (a bias constant along the keys has dBias = 0 without dLSE: the softmax
    does not see it, and what is left is the rounding of that sum)."""
    q, k, v, bias = (x.double().requires_grad_() for x in (q, k, v, bias))
    dense = bias.detach().expand(p.batch, p.heads_q, p.seq_q, p.seq_kv).clone().requires_grad_()  # dS itself

    def attend(b):
        s = p.scale * q @ k.repeat_interleave(p.group, 1).transpose(-1, -2)
        if p.softcap is not None:
            s = p.softcap * torch.tanh(s / p.softcap)
        s = (s + b).masked_fill(~torch.from_numpy(p.mask.astype(bool)), float("-inf"))
        return torch.softmax(s, -1) @ v.repeat_interleave(p.group, 1), torch.logsumexp(s, -1)

    upstream = [d_o.double(), d_lse.double()]
    grads = torch.autograd.grad(attend(bias), [q, k, v, bias], upstream)
    ds = torch.autograd.grad(attend(dense), [dense], upstream)[0]
    scales = [g.abs().max().item() for g in grads[:3]] + [ds.abs().sum_to_size(bias.shape).max().item()]
    return grads, scales


def check(got, want, tolerance, what):
    want, scales = want
    assert len(got) == 4, f"{what}: backward returned {len(got)} values, expected (dQ, dK, dV, dBias)"
    for name, g, w, scale in zip(("dQ", "dK", "dV", "dBias"), got, want, scales):
        g = torch.as_tensor(np.asarray(g, dtype=np.float64) if isinstance(g, np.ndarray) else g).double()
        assert tuple(g.shape) == tuple(w.shape), f"{what}: {name} has shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        err = (g - w).abs().max().item() / max(scale, 1e-30)
        assert err < tolerance, f"{what}: {name} is {err:.2e} (relative to its scale {scale:.3g}) from float64"


@pytest.mark.parametrize("softcap", [None, 4.0])
@pytest.mark.parametrize("spans", SPANS)
def test_minimal(spans, softcap):
    p, q, k, v, d_o, d_lse, want = make(spans, softcap)
    a = Minimal()
    assert a.envelope["bias_grad"]
    o, lse = a.forward(p, q, k, v)
    check(a.backward(p, q, k, v, o, lse, d_o, d_lse), want, 1e-12, f"Minimal {spans} softcap {softcap}")


@pytest.mark.parametrize("dtype,tolerance", [("fp32", 1e-5), ("fp16", 2e-2), ("bf16", 8e-2)])
@pytest.mark.parametrize("spans", SPANS)
def test_sdpa_math(spans, dtype, tolerance):
    # Sdpa takes no dLSE (attnfuzz adds that term itself): the reference is the one without it.
    p, q, k, v, d_o, _, want = make(spans, dtype=dtype, with_dlse=False)
    a = Sdpa("math")
    assert a.envelope["bias_grad"]
    o, _ = a.forward(p, q, k, v)
    check(a.backward(p, q, k, v, o, None, d_o, None), want, tolerance, f"Sdpa math {dtype} {spans}")


def test_sdpa_flash_declares_no_bias_grad_and_the_cpu_kernel_refuses_one():
    assert Sdpa("flash").envelope == {"bias": True, "bias_grad": False}
    assert Sdpa("cudnn").envelope == {"bias": True, "bias_grad": False}
    assert Sdpa("efficient").envelope == {"bias": True, "bias_grad": True}  # from torch's source: run it on a GPU
    # Why flash does not: torch 2.11's CPU flash kernel takes no mask that requires grad
    # (sdp_utils_cpp.h, check_attn_mask_shape). Should a later torch take one, this says so.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(1, 2, 4, 8)
    bias = torch.randn(1, 2, 4, 4, requires_grad=True)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), pytest.raises(RuntimeError, match="No available kernel"):
        torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=bias)


@pytest.mark.parametrize("softcap", [None, 4.0])
@pytest.mark.parametrize("spans", SPANS)
def test_flex_eager(spans, softcap):
    from attnfuzz_py.adapters.flex import FlexEager
    p, q, k, v, d_o, d_lse, want = make(spans, softcap)
    a = FlexEager(device="cpu")
    assert a.envelope["bias_grad"]
    o, lse = a.forward(p, q, k, v)
    check(a.backward(p, q, k, v, o, lse, d_o, d_lse), want, 2e-5, f"FlexEager {spans} softcap {softcap}")


@pytest.mark.parametrize("spans", [(1, 1, 1, 1), (1, 0, 0, 1), (0, 0, 1, 0)])
def test_flex_eager_fp16(spans):
    from attnfuzz_py.adapters.flex import FlexEager
    p, q, k, v, d_o, d_lse, want = make(spans, dtype="fp16")
    a = FlexEager(device="cpu")
    o, lse = a.forward(p, q, k, v)
    check(a.backward(p, q, k, v, o, lse, d_o, d_lse), want, 2e-2, f"FlexEager fp16 {spans}")


@pytest.mark.parametrize("softcap", [None, 4.0])
@pytest.mark.parametrize("spans", SPANS)
def test_flex_bucketed_backward(spans, softcap):
    """FlexCompiled's bucketed backward (padded B, heads, head dims, S; the bias dense over the
    padded problem) through eager flex_attention: the compiled kernel runs on CUDA only, what
    the padding does to dBias is checked here."""
    import torch.nn.attention.flex_attention as fa
    from attnfuzz_py.adapters import flex_buckets
    from attnfuzz_py.adapters.flex import FlexCompiled, _cpu_backward_allowed
    assert FlexCompiled.envelope["bias_grad"]
    p, q, k, v, d_o, d_lse, want = make(spans, softcap, dv=5)
    with _cpu_backward_allowed():
        got = flex_buckets.backward(fa.flex_attention, torch.autograd.grad, p, q, k, v, d_o, d_lse, "cpu")
    check(got, want, 2e-5, f"flex buckets {spans} softcap {softcap}")


def _jax():
    from attnfuzz_py.adapters import jax_sdpa
    if jax_sdpa.jax is None:
        pytest.skip("JAX is not installed in this Python")
    return jax_sdpa


@pytest.mark.parametrize("adapter", ["JaxSdpa", "JaxF32Logits"])
@pytest.mark.parametrize("spans", SPANS)
def test_jax(spans, adapter):
    jax_sdpa = _jax()
    p, q, k, v, d_o, _, want = make(spans, with_dlse=False)  # no dLSE: attnfuzz adds that term
    a = getattr(jax_sdpa, adapter)(precision="highest")
    assert a.envelope["bias_grad"]
    p._bias = p.bias.numpy()  # the adapter's tensors are numpy
    q, k, v, d_o = (x.numpy() for x in (q, k, v, d_o))
    o, _ = a.forward(p, q, k, v)
    check(a.backward(p, q, k, v, o, None, d_o, None), want, 1e-5, f"{adapter} {spans}")


def test_jax_cudnn_declares_no_bias():
    jax_sdpa = _jax()
    envelope = jax_sdpa.JaxSdpa("cudnn").envelope
    assert not envelope.get("bias") and not envelope.get("bias_grad")


def biased(q, k, v, *, scale, mask=None, softcap=None, bias=None):
    s = scale * q.double() @ k.double().transpose(-1, -2)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias.double()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v.double(), lse


def own_backward(q, k, v, o, lse, d_o, d_lse, *, scale, mask=None, softcap=None, bias=None):
    """The formula's backward, K and V repeated (grouped_heads="expand"): dBias is dS summed to the
    bias's shape (before the softcap's factor)."""
    qd, kd, vd, d_o, d_lse = (x.double() for x in (q, k, v, d_o, d_lse))
    s = scale * qd @ kd.transpose(-1, -2)
    t = None
    if softcap is not None:
        t = torch.tanh(s / softcap)
        s = softcap * t
    if bias is not None:
        s = s + bias.double()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    prob = torch.exp(s - lse.double()[..., None]).nan_to_num(0.0)
    ds = prob * (d_o @ vd.transpose(-1, -2) - (d_o * o.double()).sum(-1, keepdim=True) + d_lse[..., None])
    dbias = None if bias is None else ds.sum_to_size(bias.shape)
    if t is not None:
        ds = ds * (1 - t * t)
    return scale * ds @ kd, scale * ds.transpose(-1, -2) @ qd, prob.transpose(-1, -2) @ d_o, dbias


autograd_kernel = attnfuzz_py.kernel(contracts={"fp32": "fp32"})(biased)
own_kernel = attnfuzz_py.kernel(contracts={"fp32": "fp32"}, backward=own_backward, envelope={"bias_grad": True})(biased)


@pytest.mark.parametrize("softcap", [None, 4.0])
@pytest.mark.parametrize("spans", SPANS)
@pytest.mark.parametrize("kernel", [autograd_kernel, own_kernel], ids=["autograd", "own_backward"])
def test_kernel_decorator(kernel, spans, softcap):
    assert kernel.envelope == {"bias": True, "bias_grad": True}
    p, q, k, v, d_o, d_lse, want = make(spans, softcap)
    a = kernel()
    o, lse = a.forward(p, q, k, v)
    check(a.backward(p, q, k, v, o, lse, d_o, d_lse), want, 1e-6, f"@kernel {spans} softcap {softcap}")


def test_kernel_decorator_declarations():
    # With backward= the function declares dBias itself; without a bias argument there is none.
    assert attnfuzz_py.kernel(backward=own_backward)(biased).envelope == {"bias": True}
    assert attnfuzz_py.kernel(envelope={"bias_grad": False})(biased).envelope == {"bias": True, "bias_grad": False}

    def detached(q, k, v, *, scale, mask=None, softcap=None, bias=None):  # drops the bias's gradient
        return biased(q, k, v, scale=scale, mask=mask, softcap=softcap, bias=None if bias is None else bias.detach())
    detached.__qualname__ = "detached"
    p, q, k, v, d_o, d_lse, _ = make((0, 1, 1, 1))
    a = attnfuzz_py.kernel(detached)()
    o, lse = a.forward(p, q, k, v)
    with pytest.raises(ValueError, match="bias has no autograd path"):
        a.backward(p, q, k, v, o, lse, d_o, d_lse)
    b = attnfuzz_py.kernel(backward=lambda *args, **kw: own_backward(*args, **kw)[:3], envelope={"bias_grad": True})(biased)()
    with pytest.raises(ValueError, match="asks for dBias"):
        b.backward(p, q, k, v, o, lse, d_o, d_lse)


@pytest.mark.parametrize("make_adapter", [Minimal, lambda: Sdpa("math"), autograd_kernel],
                         ids=["Minimal", "Sdpa", "@kernel"])
def test_no_dbias_where_none_is_asked(make_adapter):
    """A problem with a bias that does not ask for dBias gets (dQ, dK, dV) alone."""
    p, q, k, v, d_o, d_lse, _ = make((0, 1, 1, 1))
    p.bias_requires_grad = False
    a = make_adapter()
    o, lse = a.forward(p, q, k, v)
    grads = a.backward(p, q, k, v, o, lse, d_o, d_lse if a.backward_takes_dlse else None)
    assert len(grads) == 3
