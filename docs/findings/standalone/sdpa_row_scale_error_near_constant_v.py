"""torch only: how much of an output row's error lies along the row itself (a scale error shared
by the whole row), for LibTorch's flash, memory-efficient and cuDNN kernels and for a naive fp16
computation, on inputs like attnfuzz's open rows s53-O-row-near-constant-V (fp16, V near
constant, Q and K rows whose first element is 244) and s52-dQ-row-bf16-near-constant-K.

Per kernel and configuration it prints, over the rows of O (forward) and dQ (backward), against
float64 on the same inputs:
  rms      the RMS error of the whole tensor,
  along    the largest |(X_i - R_i) . R_i| / |R_i| over the rows i (the row's error projected on
           the row itself), in units of the storage type's unit roundoff times |R_i|,
  med      the median of that over the rows.
A kernel whose row scale errs more than the others' on the same inputs shows it here without any
tolerance model; the naive computation (fp16/bf16 operands, fp32 accumulation, P rounded to the
storage type before P V) is the contract's own reference point.

    python3 sdpa_row_scale_error_near_constant_v.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"


def draw(shape, kind, dt, gen, shift_fraction=0.0, shift=0.0):
    x = torch.randn(*shape, generator=gen, device=dev, dtype=torch.float64)
    if kind == "near_constant":
        x = 0.1 + 0.001 * x
    if shift_fraction > 0:
        rows = torch.rand(*shape[:-1], generator=gen, device=dev) < shift_fraction
        x[..., 0] = torch.where(rows, torch.full_like(x[..., 0], shift), x[..., 0])
    return x.to(dt)


def naive(q, k, v, do, dt, scale):
    """fp32 products of the stored operands, P and dS rounded to the storage type before their
    products, outputs stored: the contract's naive computation."""
    qf, kf, vf, dof = (t.float() for t in (q, k, v, do))
    s = (qf @ kf.transpose(-1, -2)) * scale
    p = torch.softmax(s, dim=-1)
    p16 = p.to(dt).float()
    o = p16 @ vf
    dp = dof @ vf.transpose(-1, -2)
    delta = (dof * o).sum(-1, keepdim=True)
    ds = (p * (dp - delta)).to(dt).float()
    dq = (ds @ kf) * scale
    return o.to(dt), dq.to(dt)


def along(x, r, unit):
    x, r = x.double().flatten(0, -2), r.double().flatten(0, -2)
    norm = r.norm(dim=-1)
    keep = norm > 0
    proj = ((x - r) * r).sum(-1).abs() / norm.clamp_min(1e-300)
    rel = (proj / (unit * norm.clamp_min(1e-300)))[keep]
    return rel.max().item(), rel.median().item(), (x - r).square().mean().sqrt().item()


configs = [
    # name, dtype, B, H, Sq, Skv, D, q (kind, shift fraction), k, v
    ("s53 O row: fp16, V near constant, Q/K rows shifted by 244", torch.float16, 1, 4, 319, 3187, 192,
     ("normal", 0.5), ("normal", 1.0), ("near_constant", 0.0)),
    ("s53 without the shift", torch.float16, 1, 4, 319, 3187, 192, ("normal", 0.0), ("normal", 0.0), ("near_constant", 0.0)),
    ("s52 dQ row: bf16, K near constant, causal", torch.bfloat16, 1, 4, 1101, 1101, 128,
     ("normal", 0.0), ("near_constant", 0.0), ("normal", 0.0)),
]
print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name())
for name, dt, B, H, Sq, Skv, D, qd, kd, vd in configs:
    gen = torch.Generator(device=dev).manual_seed(0)
    q = draw((B, H, Sq, D), qd[0], dt, gen, qd[1], 244.0)
    k = draw((B, H, Skv, D), kd[0], dt, gen, kd[1], 244.0)
    v = draw((B, H, Skv, D), vd[0], dt, gen)
    do = draw((B, H, Sq, D), "normal", dt, gen)
    causal = "causal" in name
    scale = D ** -0.5
    unit = 2.0 ** -11 if dt == torch.float16 else 2.0 ** -8
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    r = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, scale=scale)
    r.backward(do.double())
    ref_o, ref_dq = r.detach(), q64.grad
    print(f"\n== {name}: B={B} H={H} Sq={Sq} Skv={Skv} D={D} {str(dt)[6:]}{' causal' if causal else ''}")
    print(f"{'kernel':10s} {'O rms':>10s} {'O along':>8s} {'O med':>7s}   {'dQ rms':>10s} {'dQ along':>8s} {'dQ med':>7s}")
    rows = []
    if not causal:
        o, dq = naive(q, k, v, do, dt, scale)
        rows.append(("naive", o, dq))
    for label, be in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                      ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        try:
            with sdpa_kernel([be]):
                o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, scale=scale)
                o.backward(do)
            torch.cuda.synchronize()
            rows.append((label, o.detach(), qq.grad))
        except Exception as e:  # a kernel that refuses these inputs says so
            print(f"{label:10s} refused: {str(e).splitlines()[0][:120]}")
    for label, o, dq in rows:
        om, omed, orms = along(o, ref_o, unit)
        qm, qmed, qrms = along(dq, ref_dq, unit)
        print(f"{label:10s} {orms:10.3e} {om:8.2f} {omed:7.3f}   {qrms:10.3e} {qm:8.2f} {qmed:7.3f}")
