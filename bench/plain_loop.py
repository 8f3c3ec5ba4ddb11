#!/usr/bin/env python3
"""The yardstick for judged cases per second: a plain PyTorch loop in the style of the
FlashAttention and SDPA test suites, run beside attnfuzz in the same device call
(docs/gpu.md, "Judged cases per second").

Per case it draws only what its kernels take (fp16/bf16, head dims that are multiples of 8,
no mask or causal, Dqk == Dv, no GQA), computes a float64 reference and a same-dtype baseline
(the math path in the case dtype) forward and backward, runs each kernel forward and backward
under sdpa_kernel, and applies the FlashAttention rule literally (max abs error <= 2 x the
baseline's + 1e-5). A case is judged once every kernel ran it.

    python3 bench/plain_loop.py --tier real --seconds 20 --kernels flash
    python3 bench/plain_loop.py --tier toy --seconds 20 --kernels flash,efficient,cudnn
    python3 bench/plain_loop.py --device cpu --kernels math --seconds 5   # a smoke test anywhere
    python3 bench/plain_loop.py --shape 1,8,1088,128 --causal --dtype bf16 --kernels flash,cudnn --seconds 10

--shape B,H,S,D fixes every case to that shape (bench/real_1088_causal_bf16.json's is 1,8,1088,128),
with --causal and --dtype fixed too: the same case as `bench_gpu_run` times, drawn afresh each time.

Prints one line of JSON: tier, kernels, cases judged, seconds, judged cases/s, rule failures.
"""
import argparse
import json
import math
import random
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
           "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
# The tiers of generators/domain.h, as far as the kernels take them.
TIERS = {"toy": dict(batch=2, heads=6, seq=24, dims=[8, 16]),
         "small": dict(batch=2, heads=8, seq=64, dims=[32, 64, 128]),
         "real": dict(batch=2, heads=16, seq=4096, dims=[64, 128])}


def corner(rng, top):
    if rng.random() < 0.35:
        corners = [m + d for m in list(range(16, 129, 16)) + list(range(192, top + 1, 64)) for d in (-1, 0, 1)]
        return rng.choice([c for c in [1, 2] + corners if 1 <= c <= top])
    return rng.randint(1, top)


def grads(fn, q, k, v, d_out):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    o = fn(q, k, v)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), d_out)
    return [o, dq, dk, dv]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tier", default="real", choices=sorted(TIERS))
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--kernels", default="flash")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--shape", help="B,H,S,D: every case this shape (Sq = Skv = S)")
    ap.add_argument("--causal", action="store_true", help="with --shape: causal (top-left, Sq = Skv)")
    ap.add_argument("--dtype", default="bf16", choices=["fp16", "bf16"], help="with --shape")
    a = ap.parse_args()
    kernels = a.kernels.split(",")
    if any(k not in KERNELS for k in kernels):
        print(f"plain_loop: --kernels takes {','.join(KERNELS)}", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("plain_loop: no CUDA device", file=sys.stderr)
        return 2
    t = TIERS[a.tier]
    fixed = None
    if a.shape:
        try:
            fixed = [int(x) for x in a.shape.split(",")]
            assert len(fixed) == 4 and min(fixed) >= 1
        except (ValueError, AssertionError):
            print("plain_loop: --shape takes B,H,S,D (positive integers)", file=sys.stderr)
            return 2
    rng = random.Random(a.seed)
    gen = torch.Generator(device=a.device).manual_seed(a.seed)
    judged = failures = drawn = 0
    start = time.perf_counter()
    while time.perf_counter() - start < a.seconds:
        drawn += 1
        b, h = rng.randint(1, t["batch"]), rng.randint(1, t["heads"])
        sq = corner(rng, t["seq"])
        skv = sq if rng.random() < 0.3 else corner(rng, t["seq"])
        d = rng.choice(t["dims"])
        dtype = rng.choice([torch.float16, torch.bfloat16])
        causal = rng.random() < 0.5
        if fixed:
            b, h, sq, d = fixed
            skv, causal = sq, a.causal
            dtype = torch.float16 if a.dtype == "fp16" else torch.bfloat16
        # Budget as the harness's real tier: B and H halve while the fp64 scores would pass 2 GiB.
        while b * h * sq * skv * 8 > (2 << 30) and b * h > 1:
            if b > 1:
                b = (b + 1) // 2
            else:
                h = (h + 1) // 2
        shape_q, shape_kv = (b, h, sq, d), (b, h, skv, d)
        q = torch.randn(shape_q, generator=gen, device=a.device).to(dtype)
        k = torch.randn(shape_kv, generator=gen, device=a.device).to(dtype)
        v = torch.randn(shape_kv, generator=gen, device=a.device).to(dtype)
        d_out = torch.randn(shape_q, generator=gen, device=a.device).to(dtype)
        sdpa = lambda q_, k_, v_: F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal)
        with sdpa_kernel(SDPBackend.MATH):
            ref = grads(sdpa, q.double(), k.double(), v.double(), d_out.double())
            base = grads(sdpa, q, k, v, d_out)
        base_err = [(x.double() - r).abs().max().item() for x, r in zip(base, ref)]
        ran_all = True
        for name in kernels:
            try:
                with sdpa_kernel(KERNELS[name]):
                    out = grads(sdpa, q, k, v, d_out)
            except RuntimeError:
                ran_all = False
                break
            for x, r, e in zip(out, ref, base_err):
                err = (x.double() - r).abs().max().item()
                if not (err <= 2 * e + 1e-5) or math.isnan(err):
                    failures += 1
        judged += ran_all
    if a.device == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - start
    print(json.dumps({"tier": a.shape or a.tier, "kernels": kernels, "drawn": drawn, "judged": judged, "seconds": round(secs, 2),
                      "judged_per_s": round(judged / secs, 2), "rule_failures": failures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
