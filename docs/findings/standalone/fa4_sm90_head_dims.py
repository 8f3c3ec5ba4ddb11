"""FlashAttention-4 (flash_attn.cute) on sm90 at small head dims: O, LSE and the gradients against
a float64 PyTorch reference, plain PyTorch and FA4 only (no attnfuzz code).

    python3 fa4_sm90_head_dims.py

Prints the versions, then per (dtype, head dim, causal, GQA) the largest error of each output
relative to the reference's largest element, beside the same for torch's SDPA (its flash or
efficient kernel) as the yardstick of a correct bf16/fp16 kernel.
"""
import sys

import torch
import torch.nn.functional as F


def reference(q, k, v, d_o, causal, scale):
    qd, kd, vd = (t.detach().double().transpose(1, 2).requires_grad_() for t in (q, k, v))
    g = qd.shape[1] // kd.shape[1]
    ke, ve = kd.repeat_interleave(g, 1), vd.repeat_interleave(g, 1)
    s = (qd @ ke.transpose(-1, -2)) * scale
    if causal:
        sq, skv = s.shape[-2:]
        s = s.masked_fill(torch.ones(sq, skv, dtype=torch.bool, device=s.device).tril(skv - sq).logical_not(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ ve
    dq, dk, dv = torch.autograd.grad([o], [qd, kd, vd], [d_o.double().transpose(1, 2)])
    return o.transpose(1, 2), lse, dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


def rel(x, ref):
    return float((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def main():
    from flash_attn.cute import flash_attn_func
    import flash_attn
    print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(), "cc", torch.cuda.get_device_capability())
    print("flash_attn (cute)", getattr(flash_attn, "__version__", "?"))
    torch.manual_seed(0)
    print(f"{'dtype':6} {'D':>4} {'causal':6} {'Hq/Hkv':6} | {'O':>9} {'LSE':>9} {'dQ':>9} {'dK':>9} {'dV':>9} | sdpa: {'O':>9} {'dQ':>9} {'dK':>9} {'dV':>9}")
    for dtype in (torch.bfloat16, torch.float16):
        for d in (8, 16, 32, 48, 64, 128):
            for causal in (False, True):
                for hq, hkv in ((2, 2), (8, 4)):
                    b, s = 1, 256
                    q = torch.randn(b, s, hq, d, device="cuda", dtype=dtype, requires_grad=True)
                    k = torch.randn(b, s, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
                    v = torch.randn(b, s, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
                    d_o = torch.randn(b, s, hq, d, device="cuda", dtype=dtype)
                    scale = d ** -0.5
                    ref = reference(q, k, v, d_o, causal, scale)
                    try:
                        out, lse = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, return_lse=True)
                        dq, dk, dv = torch.autograd.grad([out], [q, k, v], [d_o])
                        torch.cuda.synchronize()
                        fa = [rel(out, ref[0]), rel(lse, ref[1]), rel(dq, ref[2]), rel(dk, ref[3]), rel(dv, ref[4])]
                        fa_s = " ".join(f"{x:9.2e}" for x in fa)
                    except Exception as e:  # noqa: BLE001 - a refusal or a fault is a result here
                        fa_s = f"{type(e).__name__}: {str(e).splitlines()[0][:60]}"
                        if "illegal" in str(e) or "misaligned" in str(e):
                            print(f"{str(dtype)[6:]:6} {d:4} {str(causal):6} {hq}/{hkv:<4} | {fa_s}")
                            print("CUDA context lost: stopping"); return 1
                    qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
                    o2 = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale, enable_gqa=hq != hkv)
                    g2 = torch.autograd.grad([o2], [qt, kt, vt], [d_o.transpose(1, 2)])
                    sd = [rel(o2.transpose(1, 2), ref[0])] + [rel(x.transpose(1, 2), r) for x, r in zip(g2, ref[2:])]
                    print(f"{str(dtype)[6:]:6} {d:4} {str(causal):6} {hq}/{hkv:<4} | {fa_s} | {' '.join(f'{x:9.2e}' for x in sd)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
