"""The memory-efficient SDPA kernel on Q, K, V that are views of one packed, aligned QKV buffer: no fault (session 6 triage, docs/findings/README.md)

Evidence: the campaign's "misaligned address" with a packed-QKV layout needs an unaligned tensor (F-3);
with every stride and offset aligned, all twelve variants below run and are accurate on the H200.

Standalone: plain PyTorch on a CUDA GPU, nothing from attnfuzz. qkv = a [B, S, 3, H, D] tensor
(every stride and offset 16-byte aligned), q, k, v = its three slices as [B, H, S, D] views, as a
model with a fused QKV projection passes them. Variants: the whole sequence; K and V cut to a
chunk of the keys (as a split-KV caller does: keys [0, 9) or [9, 10)); with and without a boolean
mask. After a CUDA fault (it poisons the process's context) the remaining variants run in a fresh
process. Each prints the forward/backward outcome and the largest error of O, dQ, dK, dV against float64.

    python3 efficient_packed_qkv.py
"""
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, S, D = 2, 2, 10, 16
VARIANTS = [(dtype, k0, k1, masked) for dtype in ("float32", "float16") for (k0, k1) in ((0, 10), (0, 9), (9, 10))
            for masked in (False, True)]


def one(dtype, k0, k1, masked):
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    qkv = torch.randn(B, S, 3, H, D, generator=g, device="cuda").to(dt).requires_grad_(True)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, S, D] views
    k, v = k[:, :, k0:k1], v[:, :, k0:k1]
    mask = (torch.rand(B, H, S, k1 - k0, generator=g, device="cuda") < 0.8) if masked else None
    if mask is not None:
        mask[..., 0] = True
    d_out = torch.randn(B, H, S, D, generator=g, device="cuda").to(dt)
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), d_out)
    torch.cuda.synchronize()
    # float64 reference on copies
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    s = (q64 @ k64.transpose(-1, -2)) * D ** -0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    o64 = torch.softmax(s, -1) @ v64
    ref = [o64.detach(), *torch.autograd.grad(o64, (q64, k64, v64), d_out.double())]
    errs = " ".join(f"{n} {float((x.double() - r).abs().max()):.1e}" for n, x, r in zip(("O", "dQ", "dK", "dV"), (o, dq, dk, dv), ref))
    print(f"ok, max errors {errs}")


def context_ok():
    try:
        torch.ones(1, device="cuda").sum().item()
        return True
    except RuntimeError:
        return False


def main():
    first = int(sys.argv[2]) if len(sys.argv) == 3 and sys.argv[1] == "--from" else 0
    if first == 0:
        print("torch", torch.__version__, torch.cuda.get_device_name(0), f"B={B} H={H} S={S} D={D}, qkv packed [B, S, 3, H, D]")
    for n in range(first, len(VARIANTS)):
        dtype, k0, k1, masked = VARIANTS[n]
        print(f"{dtype:8s} keys [{k0}, {k1:2d}) mask {'yes' if masked else 'no ':3s}: ", end="", flush=True)
        try:
            one(dtype, k0, k1, masked)
        except RuntimeError as e:
            print("RuntimeError:", str(e).splitlines()[0][:120], flush=True)
            if not context_ok():  # a CUDA fault: the rest in a fresh process
                subprocess.run([sys.executable, __file__, "--from", str(n + 1)], timeout=120)
                return


if __name__ == "__main__":
    main()
