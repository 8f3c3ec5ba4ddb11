"""torch only: LibTorch's cuDNN attention with a float bias broadcast over the keys (a legal
attn_mask of shape [B or 1, H or 1, Sq, 1]: it need only broadcast to [B, H, Sq, Skv]), through
the op `torch.ops.aten._scaled_dot_product_cudnn_attention` and through the public
`F.scaled_dot_product_attention` with only the cuDNN kernel enabled, forward then backward.
Each configuration runs in a process of its own, since a CUDA fault is sticky. Prints one line
each: ok with the largest error against float64, or the error's first line.

Controls: the same bias expanded and made contiguous, a bias that spans the keys, and Skv = 32.
Sq = 2 is the first call of the harness's query split.

    python3 cudnn_sdpa_bias_broadcast_keys.py
"""
import subprocess
import sys

CHILD = r'''
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
entry, shape, sq, skv, contiguous = sys.argv[1], eval(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
torch.manual_seed(0)
dt = torch.bfloat16
B, Hq, Hkv, D = 2, 4, 2, 16
q = torch.randn(B, Hq, sq, D, device="cuda", dtype=dt, requires_grad=True)
k = torch.randn(B, Hkv, skv, D, device="cuda", dtype=dt, requires_grad=True)
v = torch.randn(B, Hkv, skv, D, device="cuda", dtype=dt, requires_grad=True)
dims = [B if shape[0] == "B" else 1, Hq if shape[1] == "H" else 1, sq, skv if shape[3] == "S" else 1]
bias = 1.7 * torch.randn(*dims, device="cuda", dtype=dt)
if contiguous:
    bias = bias.expand(B, Hq, sq, skv).contiguous()
step = "forward"
try:
    if entry == "op":
        # The op takes grouped K and V as they are (GQA), and the bias as it is given.
        o = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, bias, True, 0.0, False, False)[0]
    else:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
    torch.cuda.synchronize()
    step = "backward"
    o.float().square().sum().backward()
    torch.cuda.synchronize()
    kk, vv = (t.double().repeat_interleave(Hq // Hkv, 1) for t in (k, v))
    ref = F.scaled_dot_product_attention(q.double(), kk, vv, attn_mask=bias.double())
    print("ok, max |O - O64| = %.2e" % (o.double() - ref).abs().max().item())
except Exception as e:
    print("ERROR in the", step + ":", str(e).strip().splitlines()[0][:160])
'''

import concurrent.futures  # noqa: E402

import torch  # noqa: E402

print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")
# (B or 1, H or 1, Sq, 1 or S): "B", "H", "S" span that dimension, 1 broadcasts it.
shapes = [("B", 1, "Sq", 1), (1, 1, "Sq", 1), ("B", "H", "Sq", 1), ("B", 1, "Sq", "S")]
runs = []
for entry in ("op", "public"):
    for sq, skv in ((16, 26), (2, 26), (16, 32)):
        for shape in shapes:
            for contiguous in ("0", "1") if shape[3] == 1 and shape[1] == 1 and shape[0] == "B" else ("0",):
                runs.append((entry, shape, sq, skv, contiguous))


def child(run):
    entry, shape, sq, skv, contiguous = run
    r = subprocess.run([sys.executable, "-c", CHILD, entry, repr(shape), str(sq), str(skv), contiguous],
                       capture_output=True, text=True, timeout=300)
    return (r.stdout.strip().splitlines() or ["no output: " + r.stderr.strip()[-160:]])[-1]


# Processes side by side (each its own CUDA context), printed in order.
with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
    for (entry, shape, sq, skv, contiguous), line in zip(runs, pool.map(child, runs)):
        label = "[" + ", ".join(str(d) for d in shape) + "]" + (" expanded, contiguous" if contiguous == "1" else "")
        print(f"{entry:6s} Sq={sq:2d} Skv={skv} bias {label:32s} {line}")
