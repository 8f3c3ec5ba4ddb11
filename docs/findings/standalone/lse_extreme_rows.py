"""LSE of LibTorch's fused CUDA attention kernels on rows whose scores all sit far from zero.

Standalone: torch only, no attnfuzz code. Q's column 0 is set to s*a in a share of the rows and
K's column 0 to a in every row, so those query rows' scores all move by s*a^2*scale: a pure
shift (their softmax, and O, are those of the unshifted scores), and their LSE moves with it,
to far below zero (s = -1) or near fp16's overflow (s = +1). Everything else is N(0, 1).

For each kernel (flash, efficient, cudnn: the aten ops under SDPA, each returning its LSE) it
prints the LSE error against a float64 reference computed from the same rounded inputs, in
units of fp32's unit roundoff times |LSE| (one rounding of the stored LSE is <= 1 such unit),
and O's largest error relative to O's largest value. On a correct kernel the LSE error is a
few units: the score's fp32 accumulation and the scale multiply, each at |LSE|.

    python3 lse_extreme_rows.py [--seq 256] [--dim 64,128] [--dtype fp16,bf16]
"""
import argparse
import math

import torch

U32 = 2.0 ** -24


def inputs(dtype, b, h, s, d, shift, sign, share, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    scale = d ** -0.5
    a = max(1.0, round(math.sqrt(shift / scale)))
    q = torch.randn(b, h, s, d, device="cuda", generator=g, dtype=torch.float64)
    k = torch.randn(b, h, s, d, device="cuda", generator=g, dtype=torch.float64)
    v = torch.randn(b, h, s, d, device="cuda", generator=g, dtype=torch.float64)
    rows = torch.rand(b, h, s, device="cuda", generator=g, dtype=torch.float64) < share
    q[..., 0] = torch.where(rows, sign * a, q[..., 0])
    k[..., 0] = a
    q, k, v = (x.to(dtype) for x in (q, k, v))
    return q, k, v, scale, rows, a


def reference(q, k, v, scale):
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    lse = torch.logsumexp(s, dim=-1)
    o = torch.softmax(s, dim=-1) @ v.double()
    return o, lse


def kernels():
    def flash(q, k, v, scale):
        r = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)
        return r[0], r[1]

    def efficient(q, k, v, scale):
        r = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, False, scale=scale)
        return r[0], r[1][..., : q.shape[2]]

    def cudnn(q, k, v, scale):
        r = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, False, False, scale=scale)
        return r[0], r[1].reshape(q.shape[0], q.shape[1], q.shape[2])

    return {"flash": flash, "efficient": efficient, "cudnn": cudnn}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--dim", default="64,128")
    ap.add_argument("--dtype", default="fp16,bf16")
    args = ap.parse_args()
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    print(f"torch {torch.__version__} cuda {torch.version.cuda} cudnn {torch.backends.cudnn.version()} "
          f"{torch.cuda.get_device_name()}")
    print("kernel dtype D shift sign | LSE err / (u32 |LSE|): shifted rows max, rms; other rows max | O max err / max|O| | finite")
    seed = 0
    for dn in args.dtype.split(","):
        for d in (int(x) for x in args.dim.split(",")):
            for sign, shifts in ((-1.0, (8, 90, 500, 2000)), (1.0, (1e3, 8e3, 3.4e4, 6e4))):
                for shift in shifts:
                    seed += 1
                    q, k, v, scale, rows, a = inputs(dtypes[dn], 1, 4, args.seq, d, shift, sign, 0.5, seed)
                    o_ref, lse_ref = reference(q, k, v, scale)
                    unit = U32 * lse_ref.abs().clamp_min(1.0)
                    for name, f in kernels().items():
                        try:
                            o, lse = f(q, k, v, scale)
                        except Exception as e:  # a kernel that refuses says so
                            print(f"{name:9s} {dn} {d:3d} {shift:7.0f} {sign:+.0f} | refused: {str(e).splitlines()[0][:120]}")
                            continue
                        err = (lse.double() - lse_ref).abs() / unit
                        sh, other = err[rows], err[~rows]
                        o_err = ((o.double() - o_ref).abs().max() / o_ref.abs().max()).item()
                        finite = bool(torch.isfinite(o).all() and torch.isfinite(lse).all())
                        print(f"{name:9s} {dn} {d:3d} {shift:7.0f} {sign:+.0f} | "
                              f"{sh.max().item():8.2f} {sh.pow(2).mean().sqrt().item():7.2f} {other.max().item():8.2f} | "
                              f"{o_err:.2e} | {finite}")


if __name__ == "__main__":
    main()
