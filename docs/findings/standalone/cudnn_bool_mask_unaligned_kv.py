"""cuDNN SDPA with a boolean mask whose key length is not a multiple of 8: no deviation (session 6 triage, docs/findings/README.md)

Evidence against a suspected cause (the bias LibTorch builds from the mask has unaligned rows):
measured on the H200, every cuDNN error stays within 1.2-1.6x the math path's for Skv = 32..64.

Standalone: plain PyTorch on a CUDA GPU, nothing from attnfuzz. Every input is a fresh contiguous
tensor. For torch.nn.functional.scaled_dot_product_attention with a boolean attn_mask (no key
row fully masked) it compares the cuDNN kernel, the memory-efficient kernel and the math path
with a float64 reference, forward and backward, for key lengths Skv that are and are not a
multiple of 8. LibTorch hands cuDNN the mask as a [B, H, Sq, Skv] additive bias without padding
its rows, so for Skv % 8 != 0 the bias's row stride is not 16-byte aligned (the rows of Q, K and
V are). Two controls: the same mask given as a float bias (a) contiguous, (b) a view of a buffer
whose rows are padded to 16 elements (stride aligned, same values).

    python3 cudnn_bool_mask_unaligned_kv.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, SQ, D = 1, 2, 50, 128


def reference(q, k, v, mask, d_out, scale):
    """float64, the mask's True = visible; a row with no visible key gives 0 and no gradient."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    s = (scale * q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = (p / torch.where(l == 0, torch.ones_like(l), l)) @ v
    o.backward(d_out.double())
    return [o.detach(), q.grad, k.grad, v.grad]


def run(kernel, q, k, v, attn_mask, d_out, scale):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    try:
        with sdpa_kernel([kernel]):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
        o.backward(d_out)
        torch.cuda.synchronize()
    except RuntimeError as e:
        return str(e).splitlines()[0][:100]
    return [o.detach(), q.grad, k.grad, v.grad]


def rms_err(x, ref):
    e = x.double() - ref
    return float(e.pow(2).mean().sqrt()) if torch.isfinite(e).all() else float("nan")


def main():
    print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))
    print("rms error of O, dQ, dK, dV against float64; 'x math' = the kernel's rms error / the math path's")
    g = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16):
        for skv in (32, 33, 40, 43, 63, 64):
            q = torch.randn(B, H, SQ, D, generator=g, device="cuda").to(dtype)
            k = torch.randn(B, H, skv, D, generator=g, device="cuda").to(dtype)
            v = torch.randn(B, H, skv, D, generator=g, device="cuda").to(dtype)
            d_out = torch.randn(B, H, SQ, D, generator=g, device="cuda").to(dtype)
            mask = torch.rand(B, H, SQ, skv, generator=g, device="cuda") < 0.7
            mask[..., 0] = True  # every row sees a key
            scale = D ** -0.5
            ref = reference(q, k, v, mask, d_out, scale)
            bias = torch.zeros(B, H, SQ, skv, device="cuda", dtype=dtype).masked_fill(~mask, -65504.0)
            padded = torch.zeros(B, H, SQ, (skv + 15) // 16 * 16, device="cuda", dtype=dtype)[..., :skv]
            padded.copy_(bias)
            math = run(SDPBackend.MATH, q, k, v, mask, d_out, scale)
            m_err = [rms_err(x, r) for x, r in zip(math, ref)]
            for label, kernel, am in (("cudnn bool mask", SDPBackend.CUDNN_ATTENTION, mask),
                                      ("cudnn float bias", SDPBackend.CUDNN_ATTENTION, bias),
                                      ("cudnn bias aligned", SDPBackend.CUDNN_ATTENTION, padded),
                                      ("efficient bool mask", SDPBackend.EFFICIENT_ATTENTION, mask)):
                out = run(kernel, q, k, v, am, d_out, scale)
                if isinstance(out, str):
                    print(f"{str(dtype)[6:]:8s} Skv={skv:2d} {label:19s} refused: {out}")
                    continue
                errs = [rms_err(x, r) for x, r in zip(out, ref)]
                ratio = "  ".join(f"{n} {e:.2e} ({e / me:6.1f}x math)" for n, e, me in zip(("O", "dQ", "dK", "dV"), errs, m_err))
                print(f"{str(dtype)[6:]:8s} Skv={skv:2d} {label:19s} {ratio}")


if __name__ == "__main__":
    main()
