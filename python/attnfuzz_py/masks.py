"""The case's mask expression (docs/case-format.md, "Mask expressions") as a FlexAttention
mask_mod, in the coordinates of one call.

A call covers queries [q_offset, q_offset + Sq) and keys [kv_offset, kv_offset + Skv) of a
full_seq_q x full_seq_kv problem; its mask is the expression evaluated there, and-ed with the
call's band restrictions. mask_mod(b, h, q_idx, kv_idx) takes the call's own indices, as
FlexAttention passes them, and uses only element-wise tensor operations and lookups into small
captured tables, so it works under FlexAttention's vmap, under torch.compile, and on whole index
grids (dense_from_mask_mod). A random leaf has no closed form here (the harness draws it with
Philox): an expression that contains one is looked up in the dense mask the harness sent.
"""
import torch


def _diag(align, sq, skv):
    return skv - sq if align == "bottom_right" else 0


def _window(d, left, right):
    """kv - q' within [-left, right]; -1 = unbounded side. None means "always true"."""
    out = None
    if left >= 0:
        out = d >= -left
    if right >= 0:
        out = (d <= right) if out is None else out & (d <= right)
    return out


def _and(a, b):
    return b if a is None else a if b is None else a & b


def _segment_table(lengths, n, device):
    """Segment index of each position in [0, n), -1 past the last segment."""
    ids = torch.full((max(n, 1),), -1, dtype=torch.int64, device=device)
    at = 0
    for i, length in enumerate(lengths):
        end = min(at + length, n)
        if end > at:
            ids[at:end] = i
        at += length
        if at >= n:
            break
    return ids


def contains_random(expr):
    return expr["kind"] == "random" or any(contains_random(a) for a in expr.get("args", []))


def _leaf(expr, sq, skv, device):
    """A function (b, h, q, kv) -> bool tensor or None (all true), in full coordinates."""
    kind = expr["kind"]
    if kind == "none":
        return lambda b, h, q, kv: None
    if kind == "causal":
        off = _diag(expr.get("align"), sq, skv)
        return lambda b, h, q, kv: kv <= q + off
    if kind == "sliding_window":
        off, left, right = _diag(expr.get("align"), sq, skv), expr["left"], expr["right"]
        return lambda b, h, q, kv: _window(kv - (q + off), left, right)
    if kind == "prefix_lm":
        off, prefix = _diag(expr.get("align"), sq, skv), expr["prefix"]
        return lambda b, h, q, kv: (kv < prefix) | (kv <= q + off)
    if kind == "document":
        seg_q = _segment_table(expr["segments_q"], sq, device)
        seg_kv = _segment_table(expr["segments_kv"], skv, device)
        return lambda b, h, q, kv: (seg_q[q] >= 0) & (seg_q[q] == seg_kv[kv])
    if kind == "block_sparse":
        bq, bkv = expr["block_q"], expr["block_kv"]
        table = torch.tensor([[c == "1" for c in row] for row in expr["rows"]], dtype=torch.bool, device=device)
        return lambda b, h, q, kv: table[q // bq, kv // bkv]
    if kind in ("and", "or", "not"):
        args = [_leaf(a, sq, skv, device) for a in expr["args"]]
        if kind == "not":
            inner = args[0]

            def negate(b, h, q, kv):
                x = inner(b, h, q, kv)
                return (q < 0) if x is None else ~x  # q >= 0 always: not(all) is nothing
            return negate

        def combine(b, h, q, kv):
            out = None
            for f in args:
                x = f(b, h, q, kv)
                if x is None:
                    if kind == "or":
                        return None
                    continue
                out = x if out is None else (out & x if kind == "and" else out | x)
            return out
        return combine
    raise ValueError(f"mask kind '{kind}' has no mask_mod here")


def mask_mod_for(problem, device="cpu"):
    """The call's mask as a FlexAttention mask_mod (call coordinates), or None when every key is visible."""
    # A random leaf has no closed form here, and a ragged batch aligns each sequence's diagonal
    # to its own lengths: both from the dense mask.
    if contains_random(problem.mask_expr) or getattr(problem, "ragged", None):
        if problem.mask is None:
            raise ValueError("a random mask or a ragged batch needs the dense mask (not sent to supports)")
        dense = torch.from_numpy(problem.mask.copy()).to(device=device, dtype=torch.bool)
        return lambda b, h, q, kv: dense[b, h, q, kv]
    qo, ko, sq, skv = problem.q_offset, problem.kv_offset, problem.full_seq_q, problem.full_seq_kv
    expr = _leaf(problem.mask_expr, sq, skv, device)
    bands = [(r, _diag(r["align"], sq, skv)) for r in problem.restrictions]
    if isinstance(problem.mask_expr, dict) and problem.mask_expr["kind"] == "none" and not bands:
        return None

    def mask_mod(b, h, q_idx, kv_idx):
        q, kv = q_idx + qo, kv_idx + ko
        out = expr(b, h, q, kv)
        for r, off in bands:
            inside = _window(kv - (q + off), r["left"], r["right"])
            if inside is None:
                inside = q >= 0
            out = _and(out, inside if r["inside"] else ~inside)
        return (q >= 0) if out is None else out
    return mask_mod


def dense_from_mask_mod(mask_mod, batch, heads, sq, skv, device="cpu"):
    """The mask_mod evaluated on the whole index grid: bool [B][H][Sq][Skv]."""
    b = torch.arange(batch, device=device).view(-1, 1, 1, 1)
    h = torch.arange(heads, device=device).view(1, -1, 1, 1)
    q = torch.arange(sq, device=device).view(1, 1, -1, 1)
    kv = torch.arange(skv, device=device).view(1, 1, 1, -1)
    if mask_mod is None:
        return torch.ones(batch, heads, sq, skv, dtype=torch.bool, device=device)
    return mask_mod(b, h, q, kv).expand(batch, heads, sq, skv)
