"""LibTorch's cuDNN attention op with Dqk != Dv: which softmax scale does its forward use?

Standalone (torch only, no attnfuzz code) for the ledger row s60-torch-cudnn-LSE-bf16-dqk96-dv128.
Q and K are constant (every element c), so every score is scale * Dqk * c^2 and the exact LSE of
each row is ln(Skv) + scale * Dqk * c^2; the scale the kernel used is read back from its LSE:
    implied = (LSE - ln Skv) / (Dqk * c^2).
The op is called as at::scaled_dot_product_attention's cuDNN path calls it,
torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, attn_bias, compute_log_sumexp,
dropout_p, is_causal, return_debug_mask, scale), with the scale given (1/sqrt(Dqk)) and not given,
for Dqk != Dv and the controls Dqk == Dv, MHA and grouped heads (K and V repeated, as SDPA's
enable_gqa path does for cuDNN). Expected: implied == 1/sqrt(Dqk) in every line.

    python3 torch_cudnn_lse_dqk_ne_dv.py
"""
import math
import sys

import torch


def implied_scale(dqk, dv, hq, hkv, sq, skv, scale, dtype=torch.bfloat16, c=0.1):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.full((1, hq, sq, dqk), c, device="cuda", dtype=dtype)
    k = torch.full((1, hkv, skv, dqk), c, device="cuda", dtype=dtype)
    v = torch.randn(1, hkv, skv, dv, generator=g, device="cuda").to(dtype)
    if hkv != hq:  # SDPA's grouped heads for cuDNN: K and V repeated per group
        k = k.repeat_interleave(hq // hkv, dim=1)
        v = v.repeat_interleave(hq // hkv, dim=1)
    r = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, False, False, scale=scale)
    lse = r[1].float()
    cq = float(torch.tensor(c, dtype=dtype))  # c as stored
    return ((lse - math.log(skv)) / (dqk * cq * cq)).flatten()


def main():
    print(torch.__version__, torch.cuda.get_device_name(), "cuDNN", torch.backends.cudnn.version())
    for dqk, dv, hq, hkv, sq, skv in ((96, 128, 12, 1, 4, 2841), (96, 128, 12, 12, 4, 2841), (96, 128, 2, 2, 64, 512),
                                      (128, 96, 2, 2, 64, 512), (96, 96, 12, 1, 4, 2841), (128, 128, 2, 2, 64, 512)):
        for given in (True, False):
            scale = 1.0 / math.sqrt(dqk) if given else None
            try:
                s = implied_scale(dqk, dv, hq, hkv, sq, skv, scale)
                lo, hi = s.min().item(), s.max().item()
                ok = abs(lo - 1 / math.sqrt(dqk)) < 1e-3 and abs(hi - 1 / math.sqrt(dqk)) < 1e-3
                print(f"Dqk {dqk} Dv {dv} Hq {hq} Hkv {hkv} Sq {sq} Skv {skv} scale {'given' if given else 'default'}: "
                      f"implied {lo:.5f}..{hi:.5f}; 1/sqrt(Dqk) {1 / math.sqrt(dqk):.5f}, 1/sqrt(Dv) {1 / math.sqrt(dv):.5f}: "
                      f"{'ok' if ok else 'WRONG'}")
            except Exception as e:  # a refusal is a clean answer too
                print(f"Dqk {dqk} Dv {dv} Hq {hq} Hkv {hkv}: raised {type(e).__name__}: {str(e).splitlines()[0]}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
