"""torch only: F.scaled_dot_product_attention with a float attn_mask broadcast over the keys
(shape [B or 1, H or 1, Sq, 1], legal: the mask need only broadcast to [B, H, Sq, Skv]) through
the memory-efficient and the cuDNN kernels, forward and backward, each configuration in a
process of its own (a sticky CUDA fault must not reach the next). Prints one line each: ok, or
the error. Controls: the same mask expanded and made contiguous, and a mask spanning the keys.

    python3 sdpa_float_mask_broadcast_kv.py
"""
import subprocess
import sys

CHILD = r'''
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
kernel, shape, skv, contiguous = sys.argv[1], eval(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
torch.manual_seed(0)
dt = torch.bfloat16
B, H, Sq, D = 2, 4, 16, 64
q = torch.randn(B, H, Sq, D, device="cuda", dtype=dt, requires_grad=True)
k = torch.randn(B, H, skv, D, device="cuda", dtype=dt, requires_grad=True)
v = torch.randn(B, H, skv, D, device="cuda", dtype=dt, requires_grad=True)
m = torch.randn(*shape[:3], shape[3] if shape[3] != "S" else skv, device="cuda", dtype=dt)
if contiguous:
    m = m.expand(B, H, Sq, skv).contiguous()
be = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[kernel]
try:
    with sdpa_kernel([be]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        o.sum().backward()
    torch.cuda.synchronize()
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=m.double())
    print("ok, max |O - O64| = %.2e" % (o.double() - ref).abs().max().item())
except Exception as e:
    print("ERROR:", str(e).splitlines()[0][:160])
'''

print("torch", __import__("torch").__version__)
for kernel in ("efficient", "cudnn"):
    for shape in ((2, 1, 16, 1), (1, 4, 16, 1), (2, 4, 16, "S")):
        for skv in (26, 32):
            for contiguous in ("0", "1"):
                r = subprocess.run([sys.executable, "-c", CHILD, kernel, repr(shape), str(skv), contiguous],
                                   capture_output=True, text=True, timeout=120)
                out = (r.stdout.strip().splitlines() or [r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "?"])[-1]
                print(f"{kernel:9s} mask {str(shape):16s} Skv {skv:2d} {'expanded+contiguous' if contiguous == '1' else 'as given          '} {out}")
