"""cuDNN SDPA: NaN dQ for a query row whose boolean mask hides every key (F-4, docs/findings/README.md)

Standalone: plain PyTorch on a CUDA GPU, nothing from attnfuzz. B=2 H=2 Sq=50 Skv=64 D=128 (the
key length a multiple of 8, contiguous inputs), a prefix-LM-like boolean mask in which query rows
0-6 see no key (the "global rest" part of a mask partition). For the cuDNN kernel, the
memory-efficient kernel and the math path, in fp16 and bf16, it prints: NaN/Inf counts and the
largest magnitude in those rows' output, and the NaN/Inf counts of dQ, dK, dV when dO is zero on
those rows (so no gradient should flow from them) and when it is not.

    python3 cudnn_fully_masked_rows.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, SQ, SKV, D, DEAD = 2, 2, 50, 64, 128, 7


def run(kernel, q, k, v, mask, d_out):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    try:
        with sdpa_kernel([kernel]):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        o.backward(d_out)
        torch.cuda.synchronize()
    except RuntimeError as e:
        return str(e).splitlines()[0][:100]
    return o.detach(), q.grad, k.grad, v.grad


def bad(t):
    return int((~torch.isfinite(t)).sum())


def main():
    print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))
    g = torch.Generator(device="cuda").manual_seed(0)
    i = torch.arange(SQ, device="cuda")[:, None]
    j = torch.arange(SKV, device="cuda")[None, :]
    mask = ((j < 16) & (j <= i - DEAD)).expand(B, H, SQ, SKV).contiguous()  # rows 0..6 see nothing
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v, d_out = (torch.randn(B, H, n, D, generator=g, device="cuda").to(dtype) for n in (SQ, SKV, SKV, SQ))
        d_out_live = d_out.clone()
        d_out_live[:, :, :DEAD] = 0
        for label, kernel in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                              ("math", SDPBackend.MATH)):
            for dlabel, do in (("dO=0 on dead rows", d_out_live), ("dO random", d_out)):
                out = run(kernel, q, k, v, mask, do)
                if isinstance(out, str):
                    print(f"{str(dtype)[6:]:8s} {label:9s} refused: {out}")
                    break
                o, dq, dk, dv = out
                dead = o[:, :, :DEAD].float()
                print(f"{str(dtype)[6:]:8s} {label:9s} {dlabel:17s} dead rows: O non-finite {bad(dead):5d}, "
                      f"max|O| {float(dead.nan_to_num(0, 0, 0).abs().max()):.3e}, dQ non-finite {bad(dq[:, :, :DEAD]):5d}; "
                      f"live rows: O {bad(o[:, :, DEAD:])}, dQ {bad(dq[:, :, DEAD:])}; dK {bad(dk)}, dV {bad(dv)} non-finite; "
                      f"max|dK| {float(dk.float().nan_to_num(0, 0, 0).abs().max()):.3e}")


if __name__ == "__main__":
    main()
