"""The memory-efficient SDPA kernel in fp32 at large logits: fp32-level, not TF32 (session 6 triage, docs/findings/README.md)

Evidence for harness false alarms ("computes like tf32" on dQ, single dK/dV rows): on the H200 the
kernel's worst row errors are about |logit|max * 2^-24 relative (P recomputed from an fp32 LSE), 50 to 2000
times below the math path under TF32.

Standalone: plain PyTorch on a CUDA GPU, nothing from attnfuzz. fp32 inputs, contiguous, a boolean
mask (prefix-LM, sliding window) or none, queries with 5% outliers of magnitude 20 or a large
spread (logits in the tens to hundreds). Each kernel's error against a float64 reference, next to
the math path's in fp32 (TF32 off: the accuracy an fp32 caller asked for) and in TF32 (what a
kernel that quietly used TF32 would show). Per tensor: the rms error, the worst row's error and,
for dV, the worst row's relative error.

    python3 efficient_fp32_large_logits.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def reference(q, k, v, mask, d_out, scale):
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    s = scale * q @ k.transpose(-1, -2)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = (p / torch.where(l == 0, torch.ones_like(l), l)) @ v
    o.backward(d_out.double())
    return [o.detach(), q.grad, k.grad, v.grad]


def run(kernel, q, k, v, mask, d_out, scale, tf32=False):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        with sdpa_kernel([kernel]):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        o.backward(d_out)
        torch.cuda.synchronize()
    except RuntimeError as e:
        return str(e).splitlines()[0][:100]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    return [o.detach(), q.grad, k.grad, v.grad]


def errors(out, ref):
    cols = []
    for x, r in zip(out, ref):
        e = (x.double() - r)
        row = e.pow(2).sum(-1).sqrt()  # per row of the tensor (a query for O/dQ, a key for dK/dV)
        worst = int(row.flatten().argmax())
        rel = float(row.flatten()[worst] / r.pow(2).sum(-1).sqrt().flatten()[worst].clamp_min(1e-300))
        cols.append((float(e.pow(2).mean().sqrt()), float(row.max()), worst, rel))
    return cols


def case(name, sq, skv, dqk, dv, scale, mask_fn, q_kind, g):
    q = torch.randn(1, 1, sq, dqk, generator=g, device="cuda")
    if q_kind == "outliers":
        q = torch.where(torch.rand(q.shape, generator=g, device="cuda") < 0.05, 20.0 * q.sign(), q)
    else:
        q = q * 5.0
    k = torch.randn(1, 1, skv, dqk, generator=g, device="cuda")
    if q_kind != "outliers":
        k = torch.where(torch.rand(k.shape, generator=g, device="cuda") < 0.05, 20.0 * k.sign(), k)
    v = 0.6 * torch.randn(1, 1, skv, dv, generator=g, device="cuda")
    d_out = torch.randn(1, 1, sq, dv, generator=g, device="cuda")
    mask = mask_fn(sq, skv)
    ref = reference(q, k, v, mask, d_out, scale)
    logits = (scale * q.double() @ k.double().transpose(-1, -2)).abs().max()
    print(f"\n{name}: Sq={sq} Skv={skv} Dqk={dqk} Dv={dv} scale={scale} max|logit|={float(logits):.0f}")
    print("  " + " " * 16 + "".join(f"{t:>36s}" for t in ("O", "dQ", "dK", "dV: rms / worst row (index, rel)")))
    for label, kernel, tf32 in (("efficient", SDPBackend.EFFICIENT_ATTENTION, False), ("math fp32", SDPBackend.MATH, False),
                                ("math tf32", SDPBackend.MATH, True)):
        out = run(kernel, q, k, v, mask, d_out, scale, tf32)
        if isinstance(out, str):
            print(f"  {label:16s} refused: {out}")
            continue
        cells = [f"{rms:9.2e} / {worst:8.2e} ({i:3d}, {rel:7.1e})" for rms, worst, i, rel in errors(out, ref)]
        print(f"  {label:16s}" + "".join(f"{c:>36s}" for c in cells))


def prefix_lm_br(prefix):
    def f(sq, skv):
        i = torch.arange(sq, device="cuda")[:, None] + (skv - sq)
        j = torch.arange(skv, device="cuda")[None, :]
        return ((j < prefix) | (j <= i))[None, None]
    return f


def window_br(left, right):
    def f(sq, skv):
        i = torch.arange(sq, device="cuda")[:, None] + (skv - sq)
        j = torch.arange(skv, device="cuda")[None, :]
        return ((j > i - left - 1) & (j <= i + right))[None, None]  # |window| = left + 1 + right
    return f


def main():
    print("torch", torch.__version__, torch.cuda.get_device_name(0))
    g = torch.Generator(device="cuda").manual_seed(0)
    case("prefix-LM, outlier queries", 15, 54, 96, 16, 1.026, prefix_lm_br(40), "outliers", g)
    case("sliding window, large queries, outlier keys", 24, 24, 128, 128, 0.545, window_br(1, 2), "large", g)
    case("no mask, large queries, outlier keys", 64, 64, 128, 128, 0.545, lambda sq, skv: None, "large", g)
    case("no mask, outlier queries", 64, 64, 64, 64, 64 ** -0.5, lambda sq, skv: None, "outliers", g)
    case("one key (P = 1, dQ is all cancellation)", 10, 1, 8, 8, 8 ** -0.5, lambda sq, skv: None, "outliers", g)


if __name__ == "__main__":
    main()
