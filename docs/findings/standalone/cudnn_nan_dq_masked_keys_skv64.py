"""torch only: NaN dQ from LibTorch's cuDNN attention where every query row sees a key but most
keys are masked (-inf in a float attn_mask), at Skv = 64; the case attnfuzz's gpu test
`Torch/GpuBackendWithABias` drew (fp16, B = 2, Hq = 3, Hkv = 1, Sq = 2, Skv = 64, D = 16,
scale 0.78, top-left causal, a score bias over the keys of sigma 5.4, V with outliers of 20).

For each key length and mask it prints the NaN/Inf counts of O, dQ, dK, dV through the cuDNN
kernel, and the largest |dQ - dQ64| through the math path in float64 for comparison. Masks:
  bias+causal   the bias where visible and -inf where the top-left causal mask hides (what a
                caller with a bias and a causal mask passes),
  bool causal   the boolean top-left causal mask alone,
  bias only     the bias, no key masked,
  is_causal     is_causal=True, no attn_mask.

    python3 cudnn_nan_dq_masked_keys_skv64.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, HQ, HKV, SQ, D, SCALE = 2, 3, 1, 2, 16, 0.7835842119439086
dev, dt = "cuda", torch.float16
print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name())


def inputs(skv, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    q = torch.randn(B, HQ, SQ, D, generator=g, device=dev) * 0.994
    k = torch.randn(B, HKV, skv, D, generator=g, device=dev) * 0.552
    v = torch.randn(B, HKV, skv, D, generator=g, device=dev)
    v = torch.where(torch.rand(B, HKV, skv, D, generator=g, device=dev) < 0.05, torch.full_like(v, 20.0), v)
    bias = torch.randn(1, 1, 1, skv, generator=g, device=dev) * 5.386
    do = torch.randn(B, HQ, SQ, D, generator=g, device=dev)
    return [t.to(dt) for t in (q, k, v, bias, do)]


def masks(skv, bias):
    visible = torch.ones(SQ, skv, dtype=torch.bool, device=dev).tril()  # top-left causal
    return {
        "bias+causal": (bias.expand(B, HQ, SQ, skv).masked_fill(~visible, float("-inf")), False),
        "bool causal": (visible, False),
        "bias only": (bias, False),
        "is_causal": (None, True),
    }


def run(kernel, q, k, v, mask, causal, do):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel([kernel]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=SCALE, enable_gqa=True)
    o.backward(do)
    torch.cuda.synchronize()
    return o.detach(), q.grad, k.grad, v.grad


def bad(t):
    return int((~torch.isfinite(t)).sum())


for skv in (63, 64, 65, 96, 128, 192, 320):
    q, k, v, bias, do = inputs(skv)
    for name, (mask, causal) in masks(skv, bias).items():
        try:
            o, dq, dk, dv = run(SDPBackend.CUDNN_ATTENTION, q, k, v, mask, causal, do)
        except RuntimeError as e:
            print(f"Skv={skv:3d} {name:12s} cuDNN refused: {str(e).splitlines()[0][:100]}")
            continue
        m64 = None if mask is None else (mask.double() if mask.dtype != torch.bool else mask)
        o64, dq64, dk64, dv64 = run(SDPBackend.MATH, *(t.double() for t in (q, k, v)), m64, causal, do.double())
        err = (dq.double() - dq64).abs().nan_to_num(float("inf")).max().item()
        print(f"Skv={skv:3d} {name:12s} NaN/Inf: O {bad(o):4d} dQ {bad(dq):4d} dK {bad(dk):4d} dV {bad(dv):4d}"
              f"   max |dQ - dQ64| {err:.2e} (|dQ64| max {dq64.abs().max().item():.2e})")
