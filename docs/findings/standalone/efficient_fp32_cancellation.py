"""The memory-efficient SDPA kernel in fp32 where dP - D cancels (session 8 triage, docs/findings/README.md)

With one visible key per query, P = 1 and dS = P (dP - D) is exactly 0, so dQ = 0 exactly: what a
kernel returns is pure rounding noise of dP - D (dP = dO . V_j, D = dO . O, O = V_j). With few keys
and V near constant the same cancellation dominates dQ and dK. This script measures that noise for
the efficient kernel and for the math path in fp32 (TF32 off) and in TF32, against a float64
reference, and the noise relative to |dO| |V| |K| (the scale of one fp32 rounding of dP times K).

Standalone: plain PyTorch on a CUDA GPU, nothing from attnfuzz.

    python3 efficient_fp32_cancellation.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def grads(q, k, v, d_out, backend, tf32=False, mask=None):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel([backend]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    o.backward(d_out)
    torch.backends.cuda.matmul.allow_tf32 = False
    return q.grad.double(), k.grad.double()


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
                                         ("math tf32", SDPBackend.MATH, True)):
                dq, dk = grads(*f[:3], f[3], backend, tf32)
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
