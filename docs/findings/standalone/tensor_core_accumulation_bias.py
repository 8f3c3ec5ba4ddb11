"""Is the fp32 accumulation of a bf16/fp16 tensor-core dot product biased (truncated toward zero)?

Standalone: torch (and Triton) only, no attnfuzz code. Rows whose scores all sit far from zero
(Q's column `col` at s*a in every row, K's at a: every score is about s*a^2 plus N(0, D)) show it
best: a round-to-nearest accumulation errs by +-u |S| per step at random, so a row's P-weighted
mean error (what reaches its LSE) shrinks with the number of keys; a truncating one errs toward
zero at every step, the same sign for every key, and the mean error stays.

It prints, per path (a Triton tl.dot with fp32 accumulation, torch.mm with out_dtype fp32 where
the build has it, and the LSE of LibTorch's flash, efficient and cudnn kernels on the same
rows), the scores' or LSE's error against float64 in units of u32 |S| (u32 = 2^-24): the mean of
the signed error times -sign(S) (positive: toward zero), its rms, and the share of elements
that err toward zero.

    python3 tensor_core_accumulation_bias.py [--seq 512] [--dim 64,128,256]
"""
import argparse
import math

import torch

U32 = 2.0 ** -24

try:
    import triton
    import triton.language as tl

    @triton.jit
    def _qk(q_ptr, k_ptr, s_ptr, M, N, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, D, BK):
            rk = k0 + tl.arange(0, BK)
            a = tl.load(q_ptr + rm[:, None] * D + rk[None, :])
            b = tl.load(k_ptr + rn[None, :] * D + rk[:, None])
            acc = tl.dot(a, b, acc)
        tl.store(s_ptr + rm[:, None] * N + rn[None, :], acc)

    def triton_qk(q, k):
        m, d = q.shape
        n = k.shape[0]
        s = torch.empty(m, n, device=q.device, dtype=torch.float32)
        _qk[(m // 64, n // 64)](q, k, s, m, n, D=d, BM=64, BN=64, BK=min(64, d))
        return s
except Exception as e:  # noqa: BLE001
    triton_qk = None
    print(f"triton unavailable: {e}")


def mm_fp32(q, k):
    return torch.mm(q, k.t(), out_dtype=torch.float32)


def stats(err, ref):
    toward_zero = -err * torch.sign(ref)
    unit = U32 * ref.abs().clamp_min(1.0)
    t = toward_zero / unit
    return t.mean().item(), (err / unit).pow(2).mean().sqrt().item(), (toward_zero > 0).double().mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dim", default="64,128,256")
    args = ap.parse_args()
    print(f"torch {torch.__version__} cuda {torch.version.cuda} cudnn {torch.backends.cudnn.version()} {torch.cuda.get_device_name()}")
    print("path dtype D col shift sign | mean toward zero, rms, share toward zero (units u32 |S|)")
    g = torch.Generator(device="cuda").manual_seed(7)
    for dn, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        for d in (int(x) for x in args.dim.split(",")):
            scale = d ** -0.5
            for col in (0, d - 1):
                for sign, shift in ((-1.0, 0.0), (-1.0, 90.0), (-1.0, 2000.0), (1.0, 2000.0)):
                    if dn == "fp16" and shift > 1000:
                        continue
                    n = args.seq
                    q = torch.randn(n, d, device="cuda", generator=g, dtype=torch.float64)
                    k = torch.randn(n, d, device="cuda", generator=g, dtype=torch.float64)
                    v = torch.randn(n, d, device="cuda", generator=g, dtype=torch.float64)
                    if shift > 0:
                        a = max(1.0, round(math.sqrt(shift / scale)))
                        q[:, col] = sign * a
                        k[:, col] = a
                    q, k, v = (x.to(dt) for x in (q, k, v))
                    ref = q.double() @ k.double().t()
                    tag = f"{dn} {d:3d} {col:3d} {shift:6.0f} {sign:+.0f}"
                    paths = {"triton.dot": triton_qk, "torch.mm": mm_fp32}
                    for name, f in paths.items():
                        if f is None:
                            continue
                        try:
                            s = f(q, k).double()
                        except Exception as e:  # noqa: BLE001
                            print(f"{name:10s} {tag} | refused: {str(e).splitlines()[0][:100]}")
                            continue
                        m, r, share = stats(s - ref, ref)
                        print(f"{name:10s} {tag} | {m:7.2f} {r:7.2f} {share:5.2f}")
                    # The LSE of the fused kernels, per row (its error: the P-weighted mean of the scores').
                    sref = ref * scale
                    lse_ref = torch.logsumexp(sref, dim=-1)
                    q4, k4, v4 = (x.view(1, 1, n, d) for x in (q, k, v))
                    for name, f in (
                        ("flash.lse", lambda: torch.ops.aten._scaled_dot_product_flash_attention(q4, k4, v4, 0.0, False, False, scale=scale)[1]),
                        ("effic.lse", lambda: torch.ops.aten._scaled_dot_product_efficient_attention(q4, k4, v4, None, True, 0.0, False, scale=scale)[1][..., :n]),
                        ("cudnn.lse", lambda: torch.ops.aten._scaled_dot_product_cudnn_attention(q4, k4, v4, None, True, 0.0, False, False, scale=scale)[1].reshape(1, 1, n)),
                    ):
                        try:
                            lse = f().double().reshape(n)
                        except Exception as e:  # noqa: BLE001
                            print(f"{name:10s} {tag} | refused: {str(e).splitlines()[0][:100]}")
                            continue
                        m, r, share = stats(lse - lse_ref, lse_ref)
                        print(f"{name:10s} {tag} | {m:7.2f} {r:7.2f} {share:5.2f}")


if __name__ == "__main__":
    main()
