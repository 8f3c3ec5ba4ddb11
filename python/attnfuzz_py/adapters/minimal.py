"""minimal.py: a complete attnfuzz Python adapter, naive and fp32 only.

    ./attnfuzz run corpus/seed-flex-lse-merge.json --backends reference,py:attnfuzz_py.adapters.minimal:Minimal

Float64 math on the whole score matrix, the mask read from the dense mask attnfuzz sends.
Handles GQA, Dqk != Dv, Sq != Skv, softcap, a score bias and its gradient, any mask, any layout
(torch reads the strides), dLSE and fully masked rows (O = 0, LSE = -inf, zero gradients).
"""
import torch

from attnfuzz_py import Adapter


class Minimal(Adapter):
    name = "minimal"
    version = "1.0"
    contracts = {"fp32": "fp32"}  # float64 inside: well within the fp32 contract
    envelope = {"bias": True, "bias_grad": True}  # a score bias (and its dBias) reaches only adapters that declare it

    def supports(self, p):
        return None if p.dtype == "fp32" else "minimal adapter: fp32 only"

    def _scores(self, p, q, k):
        """P (0 on masked entries and rows), LSE, and tanh(S / c) for the softcap's chain rule."""
        k = k.double().repeat_interleave(p.group, dim=1)  # GQA: each query head's kv head
        s = p.scale * q.double() @ k.transpose(-1, -2)
        t = None
        if p.softcap is not None:
            t = torch.tanh(s / p.softcap)
            s = p.softcap * t
        if p.bias is not None:  # after the softcap, broadcast over its dimensions of extent 1
            s = s + p.bias.double()
        s = s.masked_fill(~p.dense_mask(), float("-inf"))
        lse = torch.logsumexp(s, dim=-1)  # -inf on fully masked rows
        prob = torch.exp(s - lse[..., None]).nan_to_num(0.0)  # exp(-inf - -inf) is NaN: no key, no weight
        return prob, lse, t

    def forward(self, p, q, k, v):
        prob, lse, _ = self._scores(p, q, k)
        return prob @ v.double().repeat_interleave(p.group, dim=1), lse

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        prob, _, t = self._scores(p, q, k)
        d_o, o, g = d_o.double(), o.double(), d_lse.double()
        dp = d_o @ v.double().repeat_interleave(p.group, dim=1).transpose(-1, -2)
        D = (d_o * o).sum(-1, keepdim=True)
        ds = prob * (dp - D + g[..., None])
        # dBias: the gradient of the biased score (the bias comes after the softcap), summed over
        # the dimensions the bias broadcasts (those of extent 1), as autograd sums a broadcast.
        dbias = ds.sum_to_size(p.bias_shape) if p.bias_requires_grad else None
        if t is not None:
            ds = ds * (1 - t * t)

        def per_kv_head(x):  # sum the query heads of each kv head's group
            return x.unflatten(1, (p.heads_kv, p.group)).sum(2)

        dq = p.scale * ds @ k.double().repeat_interleave(p.group, dim=1)
        dk = per_kv_head(p.scale * ds.transpose(-1, -2) @ q.double())
        dv = per_kv_head(prob.transpose(-1, -2) @ d_o)
        return (dq, dk, dv, dbias) if p.bias_requires_grad else (dq, dk, dv)
