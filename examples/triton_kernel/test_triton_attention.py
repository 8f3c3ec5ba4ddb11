"""A small Triton flash-attention kernel, tested with `pytest --attnfuzz` (docs/testing-python-kernels.md).

Forward in Triton: one program per (query block, batch x head), online softmax over key blocks,
O and the natural-log LSE out. Backward in torch, from the saved LSE, inside a
torch.autograd.Function, so attnfuzz's autograd backward gets dO and dLSE through it.
Top-left causal or no mask (the `causal` argument), any head dims up to 128 (Dqk may differ from
Dv), GQA through attnfuzz's default expansion of K and V.

    pytest --attnfuzz examples/triton_kernel/test_triton_attention.py --attnfuzz-tier small
    ATTNFUZZ_EXAMPLE_DEVICE=cpu pytest --attnfuzz ...    # Triton's interpreter on the CPU (fp32, fp16)

ci/gpu_python_smoke.sh runs it on the GPU machine from a fresh virtualenv.
"""
import os

DEVICE = os.environ.get("ATTNFUZZ_EXAMPLE_DEVICE", "cuda")
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # read when triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import attnfuzz_py  # noqa: E402


# Triton compiles a kernel again for each new pattern of its integer arguments (equal to 1, a
# multiple of 16); campaigns draw sizes at random, so only the constexprs select a compile here.
_SIZES = ["sqb", "sqh", "sqs", "skb", "skh", "sks", "svb", "svh", "svs", "sob", "soh", "sos", "slb", "slh",
          "H", "Sq", "Skv", "DQK", "DV"]


@triton.jit(do_not_specialize=_SIZES)
def _attention_fwd(Q, K, V, O, L, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos, slb, slh,
                   H, Sq, Skv, DQK, DV, scale, CAUSAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                   BDQK: tl.constexpr, BDV: tl.constexpr, IEEE: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rm = pid_m * BM + tl.arange(0, BM)
    rd, rv = tl.arange(0, BDQK), tl.arange(0, BDV)
    q = tl.load(Q + b * sqb + h * sqh + rm[:, None] * sqs + rd[None, :], mask=(rm[:, None] < Sq) & (rd[None, :] < DQK),
                other=0.0)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, BDV], tl.float32)
    for start in range(0, Skv, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(K + b * skb + h * skh + rn[:, None] * sks + rd[None, :],
                    mask=(rn[:, None] < Skv) & (rd[None, :] < DQK), other=0.0)
        v = tl.load(V + b * svb + h * svh + rn[:, None] * svs + rv[None, :],
                    mask=(rn[:, None] < Skv) & (rv[None, :] < DV), other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee" if IEEE else "tf32") * scale
        visible = rn[None, :] < Skv
        if CAUSAL:
            visible = visible & (rn[None, :] <= rm[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee" if IEEE else "tf32")
        m_i = m_new
    seen = l_i > 0
    lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), float("-inf"))
    o = tl.where(seen[:, None], acc / tl.where(seen, l_i, 1.0)[:, None], 0.0)
    tl.store(O + b * sob + h * soh + rm[:, None] * sos + rv[None, :], o.to(O.dtype.element_ty),
             mask=(rm[:, None] < Sq) & (rv[None, :] < DV))
    tl.store(L + b * slb + h * slh + rm, lse, mask=rm < Sq)


def _block(d):
    return max(16, triton.next_power_of_2(d))


def triton_forward(q, k, v, scale, causal):
    B, H, Sq, Dqk = q.shape
    Skv, Dv = k.shape[2], v.shape[3]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # the kernel takes the last dimension dense
    o = torch.zeros(B, H, Sq, Dv, dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, Sq), float("-inf"), dtype=torch.float32, device=q.device)
    if o.numel() == 0 or Skv == 0:  # no key: O = 0, LSE = -inf
        return o, lse
    BM = BN = 32
    grid = (triton.cdiv(Sq, BM), B * H)
    _attention_fwd[grid](q, k, v, o, lse, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                         v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                         lse.stride(0), lse.stride(1), H, Sq, Skv, Dqk, Dv, float(scale), CAUSAL=bool(causal),
                         BM=BM, BN=BN, BDQK=_block(Dqk), BDV=_block(Dv), IEEE=q.dtype == torch.float32)
    return o, lse


class _TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        o, lse = triton_forward(q, k, v, scale, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.scale, ctx.causal = scale, causal
        return o, lse

    @staticmethod
    def backward(ctx, d_o, d_lse):
        # P from the saved LSE, in fp32: dS = P * (dP - rowsum(dO * O) + dLSE).
        q, k, v, o, lse = ctx.saved_tensors
        qf, kf, vf, of, dof = (x.float() for x in (q, k, v, o, d_o))
        s = ctx.scale * (qf @ kf.transpose(-1, -2))
        if ctx.causal:
            s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
        finite = torch.isfinite(lse)[..., None]
        p = torch.where(finite, torch.exp(s - torch.where(finite, lse[..., None], 0.0)), 0.0)
        dv = p.transpose(-1, -2) @ dof
        dp = dof @ vf.transpose(-1, -2)
        ds = p * (dp - (dof * of).sum(-1, keepdim=True) + d_lse.float()[..., None])
        dq = ctx.scale * (ds @ kf)
        dk = ctx.scale * (ds.transpose(-1, -2) @ qf)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def _decline(p):
    if max(p.head_dim_qk, p.head_dim_v) > 128:
        return "head dims over 128"
    return None


@attnfuzz_py.kernel(
    contracts={"fp32": "fp32", "fp16": "fp16"} if DEVICE == "cpu" else {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"},
    envelope={"max_head_dim": 128}, supports=_decline, device=DEVICE, version=f"triton {triton.__version__}")
def triton_attention(q, k, v, *, scale, causal=False):
    return _TritonAttention.apply(q, k, v, scale, causal)
