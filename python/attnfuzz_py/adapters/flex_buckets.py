"""FlexAttention on bucketed shapes, so that torch.compile compiles each kernel once and a
campaign reuses it (FlexCompiled's default, shapes=bucketed).

torch.compile specializes flex_attention on the dtype, the head dims, the head counts (the GQA
group is a constant of the kernel), a float scale, the mask_mod's code and its closure's Python
numbers, and the strides; B, Sq and Skv can stay symbolic (dynamic=True, with sizes of 1 not
specialized: backed_size_oblivious). So each call is put in that form, exactly:

- head dims: Q, K padded with zero columns up to Dqk' = the next power of two >= 16, V and dO up
  to Dv' the same way. Zero columns add exact zeros to every dot product (the kernel itself
  rounds D up to a power of two and loads zeros there); the padded columns of O, dQ, dK, dV
  are dropped.
- heads: kv heads padded to Hkv' (a power of two >= 4), the query heads of each kv head to
  G' = 1 (no GQA) or 4 (or the next power of two), all padding zero. A padded query head has
  dO = 0 and dLSE = 0, so it adds exact zeros to dK and dV of its kv head; its outputs are
  dropped.
- the mask: the harness's dense mask, looked up by one mask_mod (padded heads see every key):
  one function, whatever the expression.
- the scale: scale=1.0 to flex_attention, the real scale applied first in the score_mod from a
  captured fp32 tensor (the same fp32 product the kernel makes with its scale; the softcap's c
  is a captured tensor as well).

So the compiled kernel is keyed by (dtype, Dqk', Dv', G', softcap or not): 12 kernels at the toy
tier. What this does not test: head dims that are not powers of two (the kernel's masked
loads of them), the caller's strides (the padded tensors are contiguous BHSD), the GQA group
sizes 2 and 3, mask_mods other than a lookup (FlexEager tests the expressions).
"""
import torch
import torch.nn.attention.flex_attention as fa


def bucket(n, floor):
    """The next power of two >= max(n, floor)."""
    b = floor
    while b < n:
        b *= 2
    return b


class Buckets:
    """The padded shape of one problem, and the copies in and out of it."""

    def __init__(self, p):
        self.p = p
        self.hkv = bucket(p.heads_kv, 4)
        self.g = 1 if p.group == 1 else bucket(p.group, 4)
        self.dqk = bucket(p.head_dim_qk, 16)
        self.dv = bucket(p.head_dim_v, 16)

    def pad(self, x, heads_per_kv, d):
        """[B][Hkv*g][S][D] -> [B][Hkv'*heads_per_kv'][S][D'] zero padded, contiguous, a leaf."""
        p = self.p
        b, _, s, dx = x.shape
        g = x.shape[1] // p.heads_kv
        out = torch.zeros(b, self.hkv, heads_per_kv, s, d, dtype=x.dtype, device=x.device)
        out[:, :p.heads_kv, :g, :, :dx] = x.reshape(b, p.heads_kv, g, s, dx)
        return out.view(b, self.hkv * heads_per_kv, s, d)

    def pad_rows(self, x):
        """LSE-shaped [B][Hq][Sq] -> [B][Hkv'*G'][Sq], zeros in the padding."""
        p = self.p
        out = torch.zeros(x.shape[0], self.hkv, self.g, x.shape[-1], dtype=x.dtype, device=x.device)
        out[:, :p.heads_kv, :p.group] = x.reshape(x.shape[0], p.heads_kv, p.group, x.shape[-1])
        return out.view(x.shape[0], self.hkv * self.g, x.shape[-1])

    def unpad(self, x, per_kv_head, d):
        """Drops the padding: [B][Hkv'*G'][S][D'] (or [B][Hkv'][S][D'] per kv head) -> logical."""
        p = self.p
        if per_kv_head:
            return x[:, :p.heads_kv, :, :d]
        b, _, s = x.shape[:3]
        y = x.view(b, self.hkv, self.g, s, *x.shape[3:])[:, :p.heads_kv, :p.group]
        y = y[..., :d] if d is not None else y
        return y.reshape(b, p.heads_q, s, *y.shape[4:])

    def inputs(self, q, k, v):
        return (self.pad(q, self.g, self.dqk), self.pad(k, 1, self.dqk), self.pad(v, 1, self.dv))

    def block_mask(self, device):
        """The dense mask as a mask_mod and BlockMask over the padded heads (padding: all visible)."""
        p = self.p
        dense = torch.ones(p.batch, self.hkv, self.g, p.seq_q, p.seq_kv, dtype=torch.bool, device=device)
        dense[:, :p.heads_kv, :p.group] = p.dense_mask(device).view(p.batch, p.heads_kv, p.group, p.seq_q, p.seq_kv)
        dense = dense.view(p.batch, self.hkv * self.g, p.seq_q, p.seq_kv)

        def mask_mod(b, h, q_idx, kv_idx):
            return dense[b, h, q_idx, kv_idx]
        return fa.create_block_mask(mask_mod, p.batch, self.hkv * self.g, p.seq_q, p.seq_kv, device=device)

    def score_mod(self, device):
        """The scale (and the softcap) as a score_mod on captured fp32 tensors."""
        p = self.p
        scale = torch.tensor(p.scale, dtype=torch.float32, device=device)
        if p.softcap is None:
            def scaled(score, b, h, q_idx, kv_idx):
                return score * scale
            return scaled
        cap = torch.tensor(p.softcap, dtype=torch.float32, device=device)

        def capped(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score * scale / cap)
        return capped


def attend(fn, p, q, k, v, device):
    """flex_attention (fn: compiled or not) on the padded problem: (O', LSE') padded, and the padded inputs."""
    b = Buckets(p)
    qp, kp, vp = b.inputs(q, k, v)
    out, aux = fn(qp, kp, vp, score_mod=b.score_mod(device), block_mask=b.block_mask(device), scale=1.0,
                  enable_gqa=b.g > 1, return_aux=fa.AuxRequest(lse=True))
    return b, (qp, kp, vp), out, aux.lse


def forward(fn, p, q, k, v, device):
    b, _, out, lse = attend(fn, p, q, k, v, device)
    return b.unpad(out, False, p.head_dim_v), b.unpad(lse, False, None)


def backward(fn, grad, p, q, k, v, d_o, d_lse, device):
    """dQ, dK, dV by autograd through the padded call; grad(outputs, inputs, grad_outputs) runs it."""
    b = Buckets(p)
    qp, kp, vp = (x.requires_grad_() for x in b.inputs(q, k, v))
    out, aux = fn(qp, kp, vp, score_mod=b.score_mod(device), block_mask=b.block_mask(device), scale=1.0,
                  enable_gqa=b.g > 1, return_aux=fa.AuxRequest(lse=True))
    g_o = b.pad(d_o.to(out.dtype), b.g, b.dv)
    g_lse = b.pad_rows(d_lse.to(aux.lse.dtype))
    dq, dk, dv = grad([out, aux.lse], [qp, kp, vp], [g_o, g_lse])
    return b.unpad(dq, False, p.head_dim_qk), b.unpad(dk, True, p.head_dim_qk), b.unpad(dv, True, p.head_dim_v)
