"""Lab probe (not product): what state makes LibTorch's cuDNN SDPA wrong on unaligned views (F-1)?
Each experiment runs in a fresh subprocess: python3 f1_probe.py [--one NAME]."""
import json, subprocess, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DT = torch.float16

def views(shape, dev, offset=0, head_pad=0, row_pad=0, fill=0.0, guard=0, seed=0):
    B, H, S, D = shape
    row = D + row_pad
    hs = S * row + head_pad
    bs = H * hs
    n = guard + offset + B * bs + guard
    buf = torch.full((n,), fill, dtype=DT, device=dev)
    v = buf.as_strided((B, H, S, D), (bs, hs, row, 1), guard + offset)
    g = torch.Generator().manual_seed(seed)
    v.copy_(torch.randn(B, H, S, D, generator=g).to(DT))
    return v

def prefix_mask(sq, skv, prefix, dev):
    i = torch.arange(sq, device=dev)[:, None]; j = torch.arange(skv, device=dev)[None, :]
    return (j < prefix) | (j <= i + (skv - sq))

def ref(q, k, v, mask, do):
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = (q @ kk.transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(~mask, float("-inf"))
    o = torch.softmax(s, -1) @ vv
    o.backward(do.double())
    return [o.detach(), q.grad, k.grad, v.grad]

def call(q, k, v, mask, do, kernel=SDPBackend.CUDNN_ATTENTION):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel([kernel]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
    o.backward(do)
    torch.cuda.synchronize()
    return [o.detach(), q.grad, k.grad, v.grad]

def errs(out, r):
    return [round(float((a.double() - b).pow(2).mean().sqrt()), 6) for a, b in zip(out, r)]

CASE = dict(B=1, Hq=6, Hkv=2, Sq=37, Skv=32, D=128, prefix=12)

def inputs(dev, unaligned=True, fill=0.0, guard=0):
    c = CASE
    q = views((c["B"], c["Hq"], c["Sq"], c["D"]), dev, head_pad=13 if unaligned else 0, fill=fill, guard=guard, seed=1)
    k = views((c["B"], c["Hkv"], c["Skv"], c["D"]), dev, fill=fill, guard=guard, seed=2)
    v = views((c["B"], c["Hkv"], c["Skv"], c["D"]), dev, offset=7 if unaligned else 0, fill=fill, guard=guard, seed=3)
    do = torch.randn(c["B"], c["Hq"], c["Sq"], c["D"], generator=torch.Generator().manual_seed(4)).to(DT).to(dev)
    m = prefix_mask(c["Sq"], c["Skv"], c["prefix"], dev)
    return q, k, v, m, do

def one(name):
    dev = "cuda"
    res = {"exp": name}
    try:
        if name == "aligned":
            a = inputs(dev, unaligned=False); res["cudnn"] = errs(call(*a), ref(*a))
        elif name == "cold_zero":
            a = inputs(dev); res["cudnn"] = errs(call(*a), ref(*a))
        elif name in ("cold_nan_fill", "cold_nan_guard", "cold_big_guard"):
            fill = float("nan") if "nan" in name else 3e4
            a = inputs(dev, fill=fill if name == "cold_nan_fill" else 0.0, guard=0)
            if "guard" in name:
                a = inputs(dev, fill=fill, guard=4096)
            res["cudnn"] = errs(call(*a), ref(*a))
        elif name == "warm_aligned_first":
            a0 = inputs(dev, unaligned=False); res["first_aligned"] = errs(call(*a0), ref(*a0))
            a = inputs(dev); res["cudnn"] = errs(call(*a), ref(*a))
        elif name == "twice":
            a = inputs(dev); r = ref(*a); o1 = call(*a); o2 = call(*a)
            res["cudnn"] = errs(o1, r); res["second"] = errs(o2, r)
            res["bitwise_same"] = all(torch.equal(x, y) for x, y in zip(o1, o2))
        elif name == "math_control":
            a = inputs(dev); res["math"] = errs(call(*a, kernel=SDPBackend.MATH), ref(*a))
        elif name == "dirty_allocator":
            # fill the caching allocator with NaN garbage, free it, then allocate the case
            junk = [torch.full((1 << 20,), float("nan"), dtype=DT, device=dev) for _ in range(64)]
            del junk
            a = inputs(dev); res["cudnn"] = errs(call(*a), ref(*a))
    except Exception as e:
        res["error"] = str(e).splitlines()[0][:200]
    print("RESULT", json.dumps(res), flush=True)

if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        one(sys.argv[2]); sys.exit(0)
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))
    for n in ["aligned", "math_control", "cold_zero", "cold_nan_fill", "cold_nan_guard", "cold_big_guard",
              "warm_aligned_first", "twice", "dirty_allocator"]:
        r = subprocess.run([sys.executable, __file__, "--one", n], capture_output=True, text=True, timeout=120)
        lines = [l for l in r.stdout.splitlines() if l.startswith("RESULT")]
        print(lines[0] if lines else f"RESULT {{\"exp\": \"{n}\", \"crash\": {json.dumps(r.stderr[-300:])}}}")
