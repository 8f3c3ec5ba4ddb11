"""The memory-efficient SDPA kernel in fp32 where dP - D cancels (session 8 triage, docs/findings/README.md)

With one visible key per query, P = 1 and dS = P (dP - D) is exactly 0, so dQ = 0 exactly: what a
kernel returns is pure rounding noise of dP - D (dP = dO . V_j, D = dO . O, O = V_j). With few keys
and V near constant the same cancellation dominates dQ and dK. This script measures that noise for
the efficient kernel and for the math path in fp32 (TF32 off) and in TF32, against a float64
reference, and the noise relative to |dO| |V| |K| (the scale of one fp32 rounding of dP times K).

Session 9: beside them, attention written out in plain PyTorch with every matmul as 3xTF32 (each
fp32 operand split into big = tf32(x) and small = tf32(x - big), the product big*big + big*small +
small*big, as CUTLASS's OpMultiplyAddFastF32, which LibTorch's memory-efficient kernel uses for
fp32 GEMMs on sm80+), and the same written out with exact fp32 products ("written-out fp32"). If
the efficient kernel's noise matches the 3xTF32 one and not the fp32 one, it computes as 3xTF32.

Standalone: plain PyTorch on a CUDA GPU, nothing from attnfuzz.

    python3 efficient_fp32_cancellation.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def grads(q, k, v, d_out, backend, allow_tf32=False, mask=None):
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel([backend]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    o.backward(d_out)
    torch.backends.cuda.matmul.allow_tf32 = False
    return q.grad.double(), k.grad.double()


def tf32(x):
    """fp32 -> fp32 with the significand rounded to 10 explicit bits, nearest even."""
    i = x.view(torch.int32).to(torch.int64)
    lsb = (i >> 13) & 1
    r = (i + (1 << 12) - 1 + lsb) & ~((1 << 13) - 1)
    return r.to(torch.int32).view(torch.float32)


def mm(a, b, three_tf32):
    """fp32 a @ b: exact products summed in float64, rounded once to fp32 (3xTF32: the split products)."""
    if not three_tf32:
        return (a.double() @ b.double()).float()
    ab, bb = tf32(a), tf32(b)
    a_s, b_s = tf32(a - ab), tf32(b - bb)
    return (ab.double() @ bb.double() + ab.double() @ b_s.double() + a_s.double() @ bb.double()).float()


def written_out(q, k, v, d_out, three_tf32):
    """Attention forward and backward, every matmul through mm(), everything else fp32."""
    scale = q.shape[-1] ** -0.5
    s = mm(q, k.transpose(-1, -2), three_tf32) * scale
    p = torch.softmax(s, dim=-1)
    o = mm(p, v, three_tf32)
    dp = mm(d_out, v.transpose(-1, -2), three_tf32)
    delta = (d_out * o).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    dq = mm(ds, k, three_tf32) * scale
    dk = mm(ds.transpose(-1, -2), q, three_tf32) * scale
    return dq.double(), dk.double()


def case(sq, skv, d, seed, near_constant_v=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, d_out = (torch.randn(1, 1, n, d, device="cuda", dtype=torch.float64, generator=g) for n in (sq, skv, skv, sq))
    if near_constant_v:
        v = 1.0 + 1e-3 * v
    return q, k, v, d_out


def main():
    print("torch", torch.__version__, torch.cuda.get_device_name())
    rows = []
    for name, (sq, skv, d, ncv) in {"one key (dQ exactly 0)": (17, 1, 4, False), "one key, D=64": (64, 1, 64, False),
                                    "4 keys, V near constant": (16, 4, 8, True), "64 keys, V near constant": (64, 64, 64, True)}.items():
        worst = {}
        for seed in range(20):
            q, k, v, d_out = case(sq, skv, d, seed, ncv)
            ref_dq, ref_dk = grads(q, k, v, d_out, SDPBackend.MATH)  # float64
            scale_dq = (d_out.abs().amax() * v.abs().amax() * k.abs().amax() * d ** 0.5 / d ** 0.5).item()
            f = [t.float() for t in (q, k, v, d_out)]
            for label, backend, tf32 in (("efficient fp32", SDPBackend.EFFICIENT_ATTENTION, False), ("math fp32", SDPBackend.MATH, False),
                                         ("math tf32", SDPBackend.MATH, True), ("written-out fp32", None, False),
                                         ("written-out 3xTF32", None, True)):
                dq, dk = grads(*f[:3], f[3], backend, tf32) if backend is not None else written_out(*f, tf32)
                e = ((dq - ref_dq).norm() / (ref_dq.norm() + scale_dq * 1e-30)).item() if ref_dq.norm() > 0 else (dq - ref_dq).abs().amax().item() / scale_dq
                ek = ((dk - ref_dk).norm() / ref_dk.norm()).item() if ref_dk.norm() > 0 else (dk - ref_dk).abs().amax().item() / scale_dq
                w = worst.setdefault(label, [0.0, 0.0])
                w[0], w[1] = max(w[0], e), max(w[1], ek)
        for label, (e, ek) in worst.items():
            rows.append((name, label, e, ek))
    print("%-26s %-16s %-34s %s" % ("case", "kernel", "worst dQ error (rel., or /scale)", "worst dK error (rel.)"))
    for name, label, e, ek in rows:
        print("%-26s %-16s %-34.3e %.3e" % (name, label, e, ek))
    print("fp32 unit roundoff 2^-24 = %.3e, TF32 2^-11 = %.3e" % (2.0 ** -24, 2.0 ** -11))


if __name__ == "__main__":
    main()
