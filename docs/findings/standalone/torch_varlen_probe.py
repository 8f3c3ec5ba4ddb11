"""LibTorch 2.11's varlen attention ops against a float64 reference, without attnfuzz.

Probes the calls behind attnfuzz's torch.flash.varlen and torch.efficient.varlen adapters on
the edges stop 56's GPU test flagged (docs/findings/LEDGER.md, s56-torch-*-varlen-*):
  flash:     a sequence with no keys in the call; a bottom-right window whose first rows see no
             key (what a key split of a bottom-right causal sequence hands the op); NaN rows in
             the packed buffers past the sequences.
  efficient: bottom-right causal (custom_mask_type 2) with a sequence that has more queries than
             keys, varlen and dense; the same through SDPA's public causal_lower_right.
Each probe prints, for rows with at least one visible key, the largest |error| of O and of the
LSE against float64, and the NaN/Inf count in O, LSE, dQ, dK, dV (the backward with dO ~ N(0,1),
dLSE = 0). Rows with no visible key are reported apart (their values are the library's
convention). Usage: python3 torch_varlen_probe.py   (one CUDA GPU)
"""
import math
import torch

dev = "cuda"
aten = torch.ops.aten


def visible(lq, lkv, causal, wl, wr):
    """[lq, lkv] bool: bottom-right aligned (diagonal j = i + lkv - lq), window wl/wr (-1 unbounded)."""
    i = torch.arange(lq).unsqueeze(1)
    j = torch.arange(lkv).unsqueeze(0)
    d = j - (i + lkv - lq)
    v = torch.ones(lq, lkv, dtype=torch.bool)
    if causal:
        v &= d <= 0
    if wr >= 0:
        v &= d <= wr
    if wl >= 0:
        v &= d >= -wl
    return v


def reference(q, k, v, do, vis, scale):
    """Per sequence, float64: q [Lq,H,D], k, v [Lkv,H,D] (heads already repeated). O, LSE, dQ, dK, dV."""
    q, k, v, do = (t.double().detach().requires_grad_(True) for t in (q, k, v, do))
    s = torch.einsum("ihd,jhd->hij", q, k) * scale
    s = s.masked_fill(~vis.to(s.device), -math.inf)
    lse = torch.logsumexp(s, -1)  # [H, Lq]
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    o = torch.einsum("hij,jhd->ihd", p, v)
    if q.numel() and k.numel():
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do.double(), allow_unused=True)
    else:
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    return o.detach(), lse.detach(), dq, dk, dv


def pack(seqs, gap, tail, fill=float("nan")):
    """Sequences [L_b, H, D] packed with `gap` fill rows between them and `tail` after; offsets."""
    h, d = seqs[0].shape[1], seqs[0].shape[2]
    parts, cu, at = [], [0], 0
    for b, s in enumerate(seqs):
        parts.append(s)
        at += s.shape[0]
        if b + 1 < len(seqs) and gap:
            parts.append(torch.full((gap, h, d), fill, dtype=s.dtype, device=s.device))
            at += gap
        cu.append(at)
    parts.append(torch.full((tail, h, d), fill, dtype=seqs[0].dtype, device=seqs[0].device))
    return torch.cat(parts), cu


def report(name, rows, lq_list, vis_list, o, lse, dq, dk, dv, ref):
    """rows: per sequence, its packed row indices (q). o [Tq,H,D]; lse [H,Tq]."""
    worst_o = worst_lse = 0.0
    nonfinite = {"O": 0, "LSE": 0, "dQ": 0, "dK": 0, "dV": 0}
    empty_rows = []
    for b, r in enumerate(rows):
        ro, rlse, rdq, rdk, rdv = ref[b]
        has_key = vis_list[b].any(1)
        for i, t in enumerate(r):
            if not has_key[i]:
                empty_rows.append((b, i, float(lse[0, t]), float(o[t].float().abs().max()) if o[t].numel() else 0.0))
                continue
            nonfinite["O"] += int((~torch.isfinite(o[t].float())).sum())
            nonfinite["LSE"] += int((~torch.isfinite(lse[:, t])).sum())
            worst_o = max(worst_o, float((o[t].double() - ro[i].to(o.device)).abs().max()))
            worst_lse = max(worst_lse, float((lse[:, t].double() - rlse[:, i].to(o.device)).abs().max()))
    for nm, g in (("dQ", dq), ("dK", dk), ("dV", dv)):
        if g is not None:
            nonfinite[nm] = int((~torch.isfinite(g.float())).sum())
    print(f"{name}: max|O err| {worst_o:.3g}, max|LSE err| {worst_lse:.3g}, non-finite where keys are visible {nonfinite}")
    if empty_rows:
        print(f"    {len(empty_rows)} rows see no key; first (b, i, LSE, max|O|): {empty_rows[:3]}")


def grad_errors(name, seq_idx, packed_grad, ref_grads, cu, what):
    worst = 0.0
    for b, (lo, hi) in enumerate(zip(cu[:-1], cu[1:])):
        g = ref_grads[b]
        n = g.shape[0]
        worst = max(worst, float((packed_grad[lo:lo + n].double() - g.to(packed_grad.device)).abs().max()) if n else 0.0)
    print(f"    {what} max|err| {worst:.3g}")


def flash_probe(name, lens_q, lens_kv, causal=False, wl=-1, wr=-1, dtype=torch.float16, h=2, d=16, gap=0, tail=0):
    torch.manual_seed(0)
    scale = 1 / math.sqrt(d)
    qs = [torch.randn(l, h, d, device=dev, dtype=dtype) for l in lens_q]
    ks = [torch.randn(l, h, d, device=dev, dtype=dtype) for l in lens_kv]
    vs = [torch.randn(l, h, d, device=dev, dtype=dtype) for l in lens_kv]
    q, cu_q = pack(qs, gap, tail)
    k, cu_k = pack(ks, gap, tail)
    v, _ = pack(vs, gap, tail)
    cq = torch.tensor(cu_q, dtype=torch.int32, device=dev)
    ck = torch.tensor(cu_k, dtype=torch.int32, device=dev)
    used_k = torch.tensor(lens_kv, dtype=torch.int32, device=dev) if gap or tail else None
    max_q, max_k = max(max(lens_q), 1), max(max(lens_kv), 1)
    # FlashAttention's is_causal means a bottom-right diagonal; a window is passed as sizes.
    out, lse, rng, unused, _ = aten._flash_attention_forward(q, k, v, cq, ck, max_q, max_k, 0.0, causal, False, scale=scale,
                                                             window_size_left=wl if wl >= 0 else None,
                                                             window_size_right=wr if wr >= 0 else None, seqused_k=used_k)
    do = torch.randn_like(out)
    vis = [visible(a, b, causal, wl, wr) for a, b in zip(lens_q, lens_kv)]
    ref = [reference(qs[b], ks[b], vs[b], do[cu_q[b]:cu_q[b] + lens_q[b]], vis[b], scale) for b in range(len(lens_q))]
    dq = dk = dv = None
    if not (gap or tail):  # the backward takes no seqused_k
        dq, dk, dv = aten._flash_attention_backward(do, q, k, v, out, lse, cq, ck, max_q, max_k, 0.0, causal, rng, unused,
                                                    scale=scale, window_size_left=wl if wl >= 0 else None,
                                                    window_size_right=wr if wr >= 0 else None)
    rows = [list(range(cu_q[b], cu_q[b] + lens_q[b])) for b in range(len(lens_q))]
    report(name, rows, lens_q, vis, out, lse, dq, dk, dv, ref)
    if dq is not None:
        grad_errors(name, 0, dq, [r[2] for r in ref], cu_q, "dQ")
        grad_errors(name, 0, dk, [r[3] for r in ref], cu_k, "dK")
        grad_errors(name, 0, dv, [r[4] for r in ref], cu_k, "dV")


def efficient_probe(name, lens_q, lens_kv, mask_type=2, dtype=torch.bfloat16, h=2, d=16, tail=0):
    torch.manual_seed(0)
    scale = 1 / math.sqrt(d)
    qs = [torch.randn(l, h, d, device=dev, dtype=dtype) for l in lens_q]
    ks = [torch.randn(l, h, d, device=dev, dtype=dtype) for l in lens_kv]
    vs = [torch.randn(l, h, d, device=dev, dtype=dtype) for l in lens_kv]
    q, cu_q = pack(qs, 0, tail)
    k, cu_k = pack(ks, 0, tail)
    v, _ = pack(vs, 0, tail)
    cq = torch.tensor(cu_q, dtype=torch.int32, device=dev)
    ck = torch.tensor(cu_k, dtype=torch.int32, device=dev)
    out, lse, seed, offset, mq, mk = aten._efficient_attention_forward(
        q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), None, cq, ck, max(lens_q), max(lens_kv), 0.0, mask_type, True, scale=scale)
    out = out[0]
    # LSE [B, H, >= max_q]: row i of sequence b at [b, :, i]; as [H, total_q] here.
    flat = torch.full((h, q.shape[0]), float("nan"), device=dev)
    for b in range(len(lens_q)):
        flat[:, cu_q[b]:cu_q[b] + lens_q[b]] = lse[b, :, :lens_q[b]]
    vis = [visible(a, b, mask_type == 2, -1, -1) if mask_type == 2 else
           (visible(a, b, False, -1, -1) & (torch.arange(b).unsqueeze(0) <= torch.arange(a).unsqueeze(1)) if mask_type == 1
            else visible(a, b, False, -1, -1)) for a, b in zip(lens_q, lens_kv)]
    do = torch.randn_like(out)
    ref = [reference(qs[b], ks[b], vs[b], do[cu_q[b]:cu_q[b] + lens_q[b]], vis[b], scale) for b in range(len(lens_q))]
    gq, gk, gv, _ = aten._efficient_attention_backward(do.unsqueeze(0), q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), None,
                                                       out.unsqueeze(0), cq, ck, max(lens_q), max(lens_kv), lse, 0.0, seed,
                                                       offset, mask_type, False, scale=scale)
    rows = [list(range(cu_q[b], cu_q[b] + lens_q[b])) for b in range(len(lens_q))]
    report(name, rows, lens_q, vis, out, flat, gq[0], gk[0], gv[0], ref)
    grad_errors(name, 0, gq[0], [r[2] for r in ref], cu_q, "dQ")
    grad_errors(name, 0, gk[0], [r[3] for r in ref], cu_k, "dK")
    grad_errors(name, 0, gv[0], [r[4] for r in ref], cu_k, "dV")


def sdpa_lower_right_probe(name, lq, lkv, dtype=torch.bfloat16, h=2, d=16, backend=None):
    """Dense SDPA with causal_lower_right, through one chosen kernel: the public API."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    torch.manual_seed(0)
    q = torch.randn(1, h, lq, d, device=dev, dtype=dtype, requires_grad=True)
    k = torch.randn(1, h, lkv, d, device=dev, dtype=dtype, requires_grad=True)
    v = torch.randn(1, h, lkv, d, device=dev, dtype=dtype, requires_grad=True)
    with sdpa_kernel([backend]):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(lq, lkv))
    do = torch.randn_like(o)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    vis = visible(lq, lkv, True, -1, -1)
    ro, rlse, rdq, rdk, rdv = reference(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), do[0].transpose(0, 1), vis,
                                        1 / math.sqrt(d))
    has = vis.any(1)
    oo = o[0].transpose(0, 1).double()
    err_o = float((oo[has] - ro[has.to(ro.device)]).abs().max())
    err_dq = float((dq[0].transpose(0, 1).double() - rdq).abs().max())
    err_dk = float((dk[0].transpose(0, 1).double() - rdk).abs().max())
    err_dv = float((dv[0].transpose(0, 1).double() - rdv).abs().max())
    nf = int((~torch.isfinite(o)).sum()) + int((~torch.isfinite(dq)).sum())
    print(f"{name}: max|O err| rows with keys {err_o:.3g}, dQ {err_dq:.3g}, dK {err_dk:.3g}, dV {err_dv:.3g}, non-finite {nf}")


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name())
    print("== flash varlen")
    flash_probe("flash causal, lens_q [10, 38], lens_kv [18, 27]", [10, 38], [18, 27], causal=True)
    flash_probe("flash no mask, a sequence with no keys", [5, 7], [0, 9])
    flash_probe("flash no mask, the last sequence with no keys", [5, 7], [9, 0])
    flash_probe("flash bottom-right window right 24, 38 queries on 3 keys", [38], [3], wr=24)
    flash_probe("flash bottom-right window right 24, left unbounded, two sequences", [10, 38], [3, 3], wr=24)
    flash_probe("flash causal with NaN gaps and tail (forward)", [10, 38], [18, 27], causal=True, gap=3, tail=5)
    flash_probe("flash no mask, no keys, NaN gaps and tail (forward)", [5, 7], [0, 9], gap=3, tail=5)
    for dt in (torch.float16, torch.bfloat16):
        print(f"== efficient varlen {dt}")
        efficient_probe("efficient BR causal, lens_q [19, 34], lens_kv [34, 8]", [19, 34], [34, 8], dtype=dt)
        efficient_probe("efficient BR causal, one sequence 34 queries, 8 keys", [34], [8], dtype=dt)
        efficient_probe("efficient BR causal, 8 queries, 34 keys (Lq < Lkv)", [8], [34], dtype=dt)
        efficient_probe("efficient BR causal, lens [19, 34] x [34, 8] with 11 NaN tail rows", [19, 34], [34, 8], dtype=dt, tail=11)
        efficient_probe("efficient TL causal, 34 queries, 8 keys", [34], [8], mask_type=1, dtype=dt)
    from torch.nn.attention import SDPBackend
    print("== dense SDPA causal_lower_right, Sq > Skv")
    for be in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        try:
            sdpa_lower_right_probe(f"SDPA {be.name} 34 queries, 8 keys", 34, 8, backend=be)
        except Exception as e:
            print(f"SDPA {be.name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
