"""@attnfuzz_py.kernel (python/attnfuzz_py/kernel.py) without the binary: the adapter it makes
hands the function what its signature asks for (the dense mask, causal, softcap, the score bias,
options, K and V repeated under GQA), takes autograd's or the function's own backward with dO and dLSE, and gives
what the hand-written Minimal adapter gives on the same problems.

    PYTHONPATH=python .deps/pyenv/bin/python -m pytest tests/python/test_kernel_decorator.py
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attnfuzz_py  # noqa: E402
from attnfuzz_py import Adapter, Problem  # noqa: E402
from attnfuzz_py.adapters.minimal import Minimal  # noqa: E402
from attnfuzz_py.kernel import is_kernel  # noqa: E402
from attnfuzz_py.masks import dense_from_mask_mod, mask_mod_for  # noqa: E402

CAUSAL = {"kind": "causal", "align": "top_left"}
NONE = {"kind": "none"}


def problem(b=1, hq=1, hkv=1, sq=5, skv=5, dqk=4, dv=4, mask=NONE, softcap=None, q_offset=0, kv_offset=0, full=None,
            dense=None, bias_spans=None):
    fq, fkv = full or (sq, skv)
    fields = dict(batch=b, heads_q=hq, heads_kv=hkv, seq_q=sq, seq_kv=skv, head_dim_qk=dqk, head_dim_v=dv, dtype="fp32",
                  scale=0.37, softcap=softcap, mask=mask, q_offset=q_offset, kv_offset=kv_offset, full_seq_q=fq,
                  full_seq_kv=fkv, restrictions=[])
    if dense is None:
        dense = dense_from_mask_mod(mask_mod_for(Problem(fields)), b, hq, sq, skv).numpy().astype(np.uint8)
    bias = None
    if bias_spans is not None:  # which of (B, Hq, Sq, Skv) the bias spans; extent 1 (broadcast) elsewhere
        shape = [n if span else 1 for n, span in zip((b, hq, sq, skv), bias_spans)]
        bias = 2 * torch.randn(*shape, generator=torch.Generator().manual_seed(7), dtype=torch.float32)
    return Problem(fields, dense, bias)


def inputs(p, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32)

    q = rand(p.batch, p.heads_q, p.seq_q, p.head_dim_qk)
    k = rand(p.batch, p.heads_kv, p.seq_kv, p.head_dim_qk)
    v = rand(p.batch, p.heads_kv, p.seq_kv, p.head_dim_v)
    d_o = rand(p.batch, p.heads_q, p.seq_q, p.head_dim_v)
    d_lse = rand(p.batch, p.heads_q, p.seq_q)
    return q, k, v, d_o, d_lse


def reference(p, q, k, v, d_o, d_lse):
    m = Minimal()
    o, lse = m.forward(p, q, k, v)
    return (o, lse), m.backward(p, q, k, v, o, lse, d_o, d_lse)


def close(got, want):
    # Gradients come back in the inputs' float32 (autograd casts them back): fp32 agreement.
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w.double(), rtol=1e-5, atol=1e-6, equal_nan=False)


def masked_attention(q, k, v, *, scale, mask=None, softcap=None):
    s = scale * q.double() @ k.double().transpose(-1, -2)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v.double(), lse


with_mask = attnfuzz_py.kernel(contracts={"fp32": "fp32"})(masked_attention)


def test_a_kernel_is_an_adapter_and_still_the_function():
    assert is_kernel(with_mask) and issubclass(with_mask, Adapter)
    assert with_mask.name == "masked_attention" and with_mask.backend == f"py:{__name__}:masked_attention"
    assert with_mask in attnfuzz_py.registered_kernels()
    p = problem()
    q, k, v, *_ = inputs(p)
    o, lse = with_mask(q, k, v, scale=0.5)  # tensors: the function itself
    torch.testing.assert_close(o, masked_attention(q, k, v, scale=0.5)[0])
    assert isinstance(with_mask(), with_mask)  # keywords only: the adapter, as the worker makes it


@pytest.mark.parametrize("shape", [
    dict(b=2, hq=4, hkv=2, sq=6, skv=9, dqk=3, dv=5),  # GQA, Sq != Skv, Dqk != Dv
    dict(hq=3, hkv=1, sq=7, skv=7),  # MQA
])
@pytest.mark.parametrize("mask", [NONE, CAUSAL, {"kind": "sliding_window", "left": 2, "right": 1, "align": "top_left"},
                                  {"kind": "prefix_lm", "prefix": 2, "align": "bottom_right"}])
def test_the_dense_mask_and_gqa_give_minimals_results(shape, mask):
    p = problem(mask=mask, **shape)
    q, k, v, d_o, d_lse = inputs(p)
    a = with_mask()
    assert a.supports(p) is None
    o, lse = a.forward(p, q, k, v)
    got = a.backward(p, q, k, v, o, lse, d_o, d_lse)
    (want_o, want_lse), want = reference(p, q, k, v, d_o, d_lse)
    close((o, lse), (want_o, want_lse))
    close(got, want)
    assert [x.shape for x in got] == [q.shape, k.shape, v.shape]


def test_fully_masked_rows_and_an_all_visible_mask():
    p = problem(sq=4, skv=4, dense=np.array([[[[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 1]]]], np.uint8),
                mask={"kind": "random", "density": 0.5, "seed": 3})
    q, k, v, d_o, d_lse = inputs(p)
    seen = []

    def records_mask(q, k, v, *, scale, mask=None):
        seen.append(mask)
        return masked_attention(q, k, v, scale=scale, mask=mask)

    a = attnfuzz_py.kernel(records_mask)()
    o, lse = a.forward(p, q, k, v)
    assert seen[-1].dtype == torch.bool and seen[-1].shape == (1, 1, 4, 4)
    assert lse[0, 0, 1] == float("-inf") and (o[0, 0, 1] == 0).all()
    dq, dk, dv = a.backward(p, q, k, v, o, lse, d_o, d_lse)
    assert (dq[0, 0, 1] == 0).all() and torch.isfinite(dq).all() and torch.isfinite(dk).all()
    a.forward(problem(), *inputs(problem())[:3])
    assert seen[-1] is None, "an all-visible mask is handed over as None"


def causal_only(q, k, v, *, scale, causal=False):
    causal_only.calls.append(causal)
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril() if causal else None
    return masked_attention(q, k, v, scale=scale, mask=mask)


causal_only.calls = []
causal_kernel = attnfuzz_py.kernel(causal_only)


def test_a_causal_argument_takes_no_mask_or_top_left_causal_and_declines_the_rest():
    a = causal_kernel()
    assert causal_kernel.envelope == {"masks": "causal_or_none", "softcap": False}
    for p, causal in ((problem(mask=NONE), False), (problem(mask=CAUSAL), True),
                      (problem(mask={"kind": "causal", "align": "bottom_right"}), True)):  # Sq = Skv: the same
        assert a.supports(p) is None
        q, k, v, d_o, d_lse = inputs(p)
        o, lse = a.forward(p, q, k, v)
        assert causal_only.calls[-1] is causal
        close((o, lse), reference(p, q, k, v, d_o, d_lse)[0])
        close(a.backward(p, q, k, v, o, lse, d_o, d_lse), reference(p, q, k, v, d_o, d_lse)[1])
    declined = [
        problem(sq=4, skv=6, mask={"kind": "causal", "align": "bottom_right"}),
        problem(mask={"kind": "sliding_window", "left": 1, "right": 0, "align": "top_left"}),
        problem(sq=3, skv=6, mask=CAUSAL, q_offset=3, full=(6, 6)),  # the second half of a causal q_split
        problem(mask={"kind": "random", "density": 0.5, "seed": 1}, dense=np.ones((1, 1, 5, 5), np.uint8)),
    ]
    for p in declined:
        assert "top-left causal" in a.supports(p) or "random" in a.supports(p)
    assert "no softcap" in a.supports(problem(softcap=20.0))


def test_a_function_without_a_mask_argument_takes_unmasked_calls_only():
    plain = attnfuzz_py.kernel(name="plain")(lambda q, k, v, *, scale: masked_attention(q, k, v, scale=scale))()
    assert plain.supports(problem()) is None
    assert "no mask" in plain.supports(problem(mask=CAUSAL))


def test_softcap_is_handed_over():
    p = problem(hq=2, hkv=1, mask=CAUSAL, softcap=1.5)
    q, k, v, d_o, d_lse = inputs(p)
    a = with_mask()
    assert a.supports(p) is None and with_mask.envelope is None
    o, lse = a.forward(p, q, k, v)
    close((o, lse), reference(p, q, k, v, d_o, d_lse)[0])
    close(a.backward(p, q, k, v, o, lse, d_o, d_lse), reference(p, q, k, v, d_o, d_lse)[1])


def biased_attention(q, k, v, *, scale, mask=None, softcap=None, bias=None):
    s = scale * q.double() @ k.double().transpose(-1, -2)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias.double()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v.double(), lse


with_bias = attnfuzz_py.kernel(contracts={"fp32": "fp32"})(biased_attention)


@pytest.mark.parametrize("spans", [(1, 1, 1, 1), (0, 1, 0, 1), (1, 0, 1, 0), (0, 0, 0, 0)])
def test_a_bias_argument_is_handed_the_bias_and_declares_it(spans):
    assert with_bias.envelope == {"bias": True, "bias_grad": True}  # autograd returns dBias
    p = problem(b=2, hq=4, hkv=2, sq=5, skv=7, mask={"kind": "causal", "align": "bottom_right"}, softcap=1.5, bias_spans=spans)
    q, k, v, d_o, d_lse = inputs(p)
    a = with_bias()
    assert a.supports(p) is None
    o, lse = a.forward(p, q, k, v)
    close((o, lse), reference(p, q, k, v, d_o, d_lse)[0])
    close(a.backward(p, q, k, v, o, lse, d_o, d_lse), reference(p, q, k, v, d_o, d_lse)[1])
    p0 = problem()
    assert a.forward(p0, *inputs(p0)[:3]) is not None and p0.bias is None  # no bias: bias=None


def test_a_function_without_a_bias_argument_declines_a_bias():
    a = with_mask()
    assert a.supports(problem()) is None
    assert "takes no score bias" in a.supports(problem(bias_spans=(0, 1, 1, 1)))


def explicit_backward(q, k, v, o, lse, d_o, d_lse, *, scale, mask=None):
    explicit_backward.heads.append((q.shape[1], k.shape[1]))
    s = scale * q.double() @ k.double().transpose(-1, -2)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.exp(s - lse.double()[..., None]).nan_to_num(0.0)
    d_o = d_o.double()
    ds = p * (d_o @ v.double().transpose(-1, -2) - (d_o * o.double()).sum(-1, keepdim=True) + d_lse.double()[..., None])
    return scale * ds @ k.double(), scale * ds.transpose(-1, -2) @ q.double(), p.transpose(-1, -2) @ d_o


def forward_for_own_backward(q, k, v, *, scale, mask=None):
    return masked_attention(q, k, v, scale=scale, mask=mask)


explicit_backward.heads = []
with_own_backward = attnfuzz_py.kernel(name="own_backward", backward=explicit_backward)(forward_for_own_backward)


def test_an_own_backward_gets_repeated_heads_and_its_kv_gradients_are_summed():
    p = problem(b=2, hq=6, hkv=2, sq=5, skv=7, dqk=3, dv=2, mask=CAUSAL)
    q, k, v, d_o, d_lse = inputs(p)
    a = with_own_backward()
    o, lse = a.forward(p, q, k, v)
    got = a.backward(p, q, k, v, o, lse, d_o, d_lse)
    assert explicit_backward.heads[-1] == (6, 6)
    close(got, reference(p, q, k, v, d_o, d_lse)[1])
    with pytest.raises(TypeError, match="softcap missing"):  # it would be called with the softcap it cannot take
        attnfuzz_py.kernel(name="own_backward_no_softcap", backward=explicit_backward)(masked_attention)


def test_dlse_declarations():
    p = problem(mask=CAUSAL)
    q, k, v, d_o, d_lse = inputs(p)

    def detached_lse(q, k, v, *, scale, mask=None):
        o, lse = masked_attention(q, k, v, scale=scale, mask=mask)
        return o, lse.detach()

    liar = attnfuzz_py.kernel(name="detached")(detached_lse)()
    o, lse = liar.forward(p, q, k, v)
    with pytest.raises(ValueError, match="backward_takes_dlse=False"):
        liar.backward(p, q, k, v, o, lse, d_o, d_lse)
    honest = attnfuzz_py.kernel(name="detached_declared", backward_takes_dlse=False)(detached_lse)()
    assert honest.backward_takes_dlse is False
    got = honest.backward(p, q, k, v, o, lse, d_o, None)  # attnfuzz sends no dLSE then
    close(got, reference(p, q, k, v, d_o, torch.zeros_like(d_lse))[1])
    no_lse = attnfuzz_py.kernel(name="no_lse", returns_lse=False)(
        lambda q, k, v, *, scale: masked_attention(q, k, v, scale=scale)[0])
    assert no_lse.backward_takes_dlse is False and no_lse().forward(problem(), q, k, v)[1] is None


def test_options_come_from_the_backend_name():
    def tiled(q, k, v, *, scale, mask=None, block="16"):
        tiled.blocks.append(block)
        return masked_attention(q, k, v, scale=scale, mask=mask)

    tiled.blocks = []
    cls = attnfuzz_py.kernel(tiled)
    assert cls.option_names == ("block",)
    a = cls(block="64")  # py:MODULE:tiled?block=64
    p = problem()
    a.forward(p, *inputs(p)[:3])
    assert tiled.blocks == ["64"]
    with pytest.raises(ValueError, match="unknown option"):
        cls(blok="64")


def test_declarations_that_cannot_hold_are_refused():
    with pytest.raises(TypeError, match="scale"):
        attnfuzz_py.kernel(lambda q, k, v: q)
    with pytest.raises(TypeError, match="mask.*causal"):
        attnfuzz_py.kernel(lambda q, k, v, *, scale, mask=None, causal=False: q)
    with pytest.raises(ValueError, match="returns_lse"):
        attnfuzz_py.kernel(returns_lse=False, backward_takes_dlse=True)(masked_attention)
    with pytest.raises(ValueError, match="no LSE"):
        k_ = attnfuzz_py.kernel(name="forgets_lse")(lambda q, k, v, *, scale: masked_attention(q, k, v, scale=scale)[0])
        k_().forward(problem(), *inputs(problem())[:3])
