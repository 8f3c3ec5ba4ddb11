"""LibTorch's efficient-attention varlen backward with a sequence that has no keys.

Standalone (torch only, no attnfuzz code). A sequence b with cu_seqlens_k[b+1] == cu_seqlens_k[b]
sees no key: its forward rows are O = 0 (LSE -inf), and every gradient of its queries is 0
(dQ = sum over visible keys of dS K: an empty sum). The script runs
torch.ops.aten._efficient_attention_forward / _efficient_attention_backward on packed (varlen)
inputs where some sequence has zero keys, with the CUDA caching allocator's free memory first
filled with a sentinel (NaN, then 7.0), and prints what dQ holds in that sequence's rows: exactly 0
is right; the sentinel means the rows were never written, any other value that they were written
with something else (WRONG either way). The flash varlen ops on the same inputs, for comparison.

    python3 torch_efficient_varlen_empty_keys.py
"""
import itertools
import math
import sys

import torch


def prefill_allocator(value, mib=256):
    # Freed blocks stay in the caching allocator: the next torch.empty of the op reuses them.
    x = torch.full((mib * 1024 * 1024 // 4,), value, dtype=torch.float32, device="cuda")
    del x


def run(op, lens_q, lens_k, H=2, D=16, dtype=torch.bfloat16, sentinel=float("nan"), causal=False):
    g = torch.Generator(device="cuda").manual_seed(0)
    tq, tk = sum(lens_q), max(sum(lens_k), 1)  # the key buffer keeps a row, as max_seqlen_k >= 1 needs
    q = torch.randn(tq, H, D, generator=g, device="cuda").to(dtype)
    k = torch.randn(tk, H, D, generator=g, device="cuda").to(dtype)
    v = torch.randn(tk, H, D, generator=g, device="cuda").to(dtype)
    do = torch.randn(tq, H, D, generator=g, device="cuda").to(dtype)
    cu_q = torch.tensor([0] + list(itertools.accumulate(lens_q)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(itertools.accumulate(lens_k)), dtype=torch.int32, device="cuda")
    max_q, max_k = max(max(lens_q), 1), max(max(lens_k), 1)
    scale = 1.0 / math.sqrt(D)
    prefill_allocator(sentinel)
    if op == "efficient":
        out, lse, seed, offset, _, _ = torch.ops.aten._efficient_attention_forward(
            q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), None, cu_q, cu_k, max_q, max_k, 0.0, int(causal), True, scale=scale)
        prefill_allocator(sentinel)
        dq, dk, dv, _ = torch.ops.aten._efficient_attention_backward(
            do.unsqueeze(0), q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), None, out, cu_q, cu_k, max_q, max_k, lse, 0.0,
            seed, offset, int(causal), False, scale=scale)
        out, dq = out[0], dq[0]
    else:
        out, lse, seed, offset, _ = torch.ops.aten._flash_attention_forward(
            q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal, False, scale=scale)
        prefill_allocator(sentinel)
        dq, dk, dv = torch.ops.aten._flash_attention_backward(
            do, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, 0.0, causal, seed, offset, scale=scale)
    torch.cuda.synchronize()
    rows = []
    start = 0
    for b, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        if lk == 0 and lq > 0:
            o_b, dq_b = out[start:start + lq].float(), dq[start:start + lq].float()
            rows.append(f"seq {b} (Lq {lq}, Lk 0): O max|.| {o_b.abs().nan_to_num(float('inf')).max().item():.3g} "
                        f"NaN {o_b.isnan().sum().item()}; dQ NaN {dq_b.isnan().sum().item()} of {dq_b.numel()}, "
                        f"equal to the sentinel {int((dq_b == sentinel).sum().item())}, nonzero {int((dq_b != 0).sum().item())}, "
                        f"max|finite| {dq_b.nan_to_num(0.0).abs().max().item():.3g}")
        start += lq
    return rows


def main():
    print(torch.__version__, torch.cuda.get_device_name(), file=sys.stderr)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for op in ("efficient", "flash"):
        for lens_q, lens_k in (([16], [0]), ([5, 16], [7, 0]), ([16, 3], [0, 9])):
            for sentinel in (float("nan"), 7.0):
                try:
                    rows = run(op, lens_q, lens_k, sentinel=sentinel)
                    verdict = "WRONG" if any(" nonzero 0," not in r for r in rows) else "ok"
                    print(f"{op} lens_q {lens_q} lens_k {lens_k} sentinel {sentinel}: {verdict}; " + " | ".join(rows))
                except Exception as e:  # a refusal is a clean answer too
                    print(f"{op} lens_q {lens_q} lens_k {lens_k} sentinel {sentinel}: raised {type(e).__name__}: {str(e).splitlines()[0]}")


if __name__ == "__main__":
    main()
