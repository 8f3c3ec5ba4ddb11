"""FlexAttention on bucketed shapes, so that torch.compile compiles each kernel once and a
campaign reuses it (FlexCompiled's default, shapes=bucketed).

torch.compile specializes flex_attention on the dtype, the head dims, the head counts (the GQA
group is a constant of the kernel), a float scale, the mask_mod's code and its closure's Python
numbers, and the strides. So each call is put in a fixed form, exactly:

- head dims: Q, K padded with zero columns up to Dqk' = the next power of two >= 16, V and dO up
  to Dv' the same way. Zero columns add exact zeros to every dot product (the kernel itself
  rounds D up to a power of two and loads zeros there); the padded columns of O, dQ, dK, dV
  are dropped.
- heads: kv heads padded to Hkv' (a power of two >= 4), the query heads of each kv head to
  G' = 1 (no GQA) or 4 (or the next power of two), all padding zero. A padded query head has
  dO = 0 and dLSE = 0, so it adds exact zeros to dK and dV of its kv head.
- B, Sq, Skv: symbolic in the forward (dynamic=True, sizes of 1 not specialized:
  backed_size_oblivious). The backward (forward and backward of a training graph) pads them
  instead: with backed_size_oblivious, torch 2.11 compiles the backward of a dynamic-shape
  flex_attention with the strides of its first call written in, and the next sequence length
  fails its stride assertion (measured on the H200; docs/findings/standalone/
  flex_compiled_dynamic_backward_strides.py). So there B' = the next power of two >= 2, and
  Sq' = Skv' = 32, 128, 512, 2048, ... (the smallest >= max(Sq, Skv)): one length for both, so
  that the backward's buckets are four up to S = 2048, not sixteen (each is a compile of about
  4 s in every worker process; the forward still runs Sq != Skv as they are). Padded queries see
  every key, with dO = 0 and dLSE = 0 (exact zeros in dK, dV); padded keys are masked for every
  real query; padded batches are zero.
- the mask: the harness's dense mask, looked up by one mask_mod (padding as above): one
  function, whatever the expression.
- the scale: scale=1.0 to flex_attention, the real scale applied first in the score_mod from a
  captured fp32 tensor (the same fp32 product the kernel makes with its scale; the softcap's c
  is a captured tensor as well).
- the score bias: dense over the padded problem in fp32 (exact: its values are the case
  dtype's), zeros in the padding, looked up in the score_mod after the softcap: one function,
  whatever dimensions the bias broadcasts over. Where dBias is asked, the dense bias is made by
  autograd from a leaf of the bias's broadcast shape: flex_attention's backward gives the dense
  tensor's gradient (one add per score element), and autograd drops its padding and sums it over
  the broadcast dimensions into the leaf's.

Padded results are dropped. What this does not test of the compiled kernel: head dims that are
not powers of two (its masked loads of them), the caller's strides (padded tensors are
contiguous BHSD), GQA groups of 2 and 3, mask_mods other than a lookup (FlexEager runs the
expressions), a bias's broadcast lookup (FlexEager indexes it at 0 along its broadcast
dimensions), and in the backward, sequence lengths other than the buckets and Sq != Skv.
"""
import torch
import torch.nn.attention.flex_attention as fa

from attnfuzz_py.adapters.buckets import bucket


class Buckets:
    """The padded shape of one problem (pad_seq: B, Sq, Skv too), and the copies in and out of it."""

    def __init__(self, p, pad_seq):
        self.p = p
        self.hkv = bucket(p.heads_kv, 4)
        self.g = 1 if p.group == 1 else bucket(p.group, 4)
        self.dqk = bucket(p.head_dim_qk, 16)
        self.dv = bucket(p.head_dim_v, 16)
        self.b = bucket(p.batch, 2) if pad_seq else p.batch
        s = bucket(max(p.seq_q, p.seq_kv), 32, 4)
        self.sq = s if pad_seq else p.seq_q
        self.skv = s if pad_seq else p.seq_kv

    def pad_rows(self, x):
        """LSE-shaped [B][Hq][Sq] -> [B'][Hkv'*G'][Sq'], zeros in the padding."""
        p = self.p
        out = torch.zeros(self.b, self.hkv, self.g, self.sq, dtype=x.dtype, device=x.device)
        out[:p.batch, :p.heads_kv, :p.group, :p.seq_q] = x.reshape(p.batch, p.heads_kv, p.group, p.seq_q)
        return out.view(self.b, self.hkv * self.g, self.sq)

    def unpad(self, x, query_heads, d=None):
        """Drops the padding: [B'][Hkv'*G'][Sq'](...) or, per kv head, [B'][Hkv'][Skv'][D'] -> logical."""
        p = self.p
        if not query_heads:
            return x[:p.batch, :p.heads_kv, :p.seq_kv, :d]
        y = x.view(self.b, self.hkv, self.g, *x.shape[2:])[:p.batch, :p.heads_kv, :p.group, :p.seq_q]
        y = y[..., :d] if d is not None else y
        return y.reshape(p.batch, p.heads_q, p.seq_q, *y.shape[4:])

    def inputs(self, q, k, v):
        return (self.pad(q, True, self.dqk), self.pad(k, False, self.dqk), self.pad(v, False, self.dv))

    def pad(self, x, query_heads, dp):
        """[B][H][S][D] (query heads or kv heads) -> [B'][Hkv' * (G' or 1)][S'][dp], zeros in the padding."""
        p = self.p
        b, _, s, d = x.shape
        g, gp, sp = (p.group, self.g, self.sq) if query_heads else (1, 1, self.skv)
        out = torch.zeros(self.b, self.hkv, gp, sp, dp, dtype=x.dtype, device=x.device)
        out[:b, :p.heads_kv, :g, :s, :d] = x.reshape(b, p.heads_kv, g, s, d)
        return out.view(self.b, self.hkv * gp, sp, dp)

    def block_mask(self, device):
        """The dense mask as a mask_mod and BlockMask over the padded problem."""
        p = self.p
        dense = torch.ones(self.b, self.hkv, self.g, self.sq, self.skv, dtype=torch.bool, device=device)
        dense[:p.batch, :p.heads_kv, :p.group, :p.seq_q, p.seq_kv:] = False  # padded keys: no real query sees them
        dense[:p.batch, :p.heads_kv, :p.group, :p.seq_q, :p.seq_kv] = \
            p.dense_mask(device).view(p.batch, p.heads_kv, p.group, p.seq_q, p.seq_kv)
        dense = dense.view(self.b, self.hkv * self.g, self.sq, self.skv)

        def mask_mod(b, h, q_idx, kv_idx):
            return dense[b, h, q_idx, kv_idx]
        return fa.create_block_mask(mask_mod, self.b, self.hkv * self.g, self.sq, self.skv, device=device)

    def dense_bias(self, device, bias=None):
        """The score bias (bias: a leaf that requires grad, else p.bias) over the padded problem,
        fp32 [B'][Hkv'*G'][Sq'][Skv'], zeros in the padding, made by differentiable ops; None where
        the call has none."""
        p = self.p
        bias = p.bias if bias is None else bias
        if bias is None:
            return None
        out = torch.zeros(self.b, self.hkv, self.g, self.sq, self.skv, dtype=torch.float32, device=device)
        full = bias.to(device=device, dtype=torch.float32).expand(p.batch, p.heads_q, p.seq_q, p.seq_kv)
        out[:p.batch, :p.heads_kv, :p.group, :p.seq_q, :p.seq_kv] = full.reshape(p.batch, p.heads_kv, p.group, p.seq_q, p.seq_kv)
        return out.view(self.b, self.hkv * self.g, self.sq, self.skv)

    def score_mod(self, device, bias=None):
        """The scale (and the softcap, then the bias: dense_bias's) as a score_mod on captured fp32 tensors."""
        p = self.p
        scale = torch.tensor(p.scale, dtype=torch.float32, device=device)
        if p.softcap is None:
            def scaled(score, b, h, q_idx, kv_idx):
                return score * scale
            mod = scaled
        else:
            cap = torch.tensor(p.softcap, dtype=torch.float32, device=device)

            def capped(score, b, h, q_idx, kv_idx):
                return cap * torch.tanh(score * scale / cap)
            mod = capped
        bias = self.dense_bias(device, bias)
        if bias is None:
            return mod

        def biased(score, b, h, q_idx, kv_idx):
            return mod(score, b, h, q_idx, kv_idx) + bias[b, h, q_idx, kv_idx]
        return biased

    def attend(self, fn, q, k, v, device, bias=None):
        return fn(q, k, v, score_mod=self.score_mod(device, bias), block_mask=self.block_mask(device), scale=1.0,
                  enable_gqa=self.g > 1, return_aux=fa.AuxRequest(lse=True))


def forward(fn, p, q, k, v, device):
    """O, LSE of flex_attention (fn: compiled with dynamic B and S, or not) on the padded heads and head dims."""
    b = Buckets(p, pad_seq=False)
    out, aux = b.attend(fn, *b.inputs(q, k, v), device)
    return b.unpad(out, True, p.head_dim_v), b.unpad(aux.lse, True)


def backward(fn, grad, p, q, k, v, d_o, d_lse, device):
    """dQ, dK, dV (and dBias where p.bias_requires_grad) by autograd through the padded call (fn:
    compiled with static shapes, or not); grad(outputs, inputs, grad_outputs) runs the backward."""
    b = Buckets(p, pad_seq=True)
    qp, kp, vp = (x.requires_grad_() for x in b.inputs(q, k, v))
    inputs = [qp, kp, vp]
    bias = None
    if p.bias_requires_grad:  # a leaf of the bias's own (broadcast) shape: its gradient is dBias
        bias = p.bias.detach().requires_grad_()
        inputs.append(bias)
    out, aux = b.attend(fn, qp, kp, vp, device, bias)
    g_o = b.pad(d_o.to(out.dtype), True, b.dv)
    g_lse = b.pad_rows(d_lse.to(aux.lse.dtype))
    grads = grad([out, aux.lse], inputs, [g_o, g_lse])
    dq, dk, dv = grads[:3]
    unpadded = (b.unpad(dq, True, p.head_dim_qk), b.unpad(dk, False, p.head_dim_qk), b.unpad(dv, False, p.head_dim_v))
    return unpadded + tuple(grads[3:])
