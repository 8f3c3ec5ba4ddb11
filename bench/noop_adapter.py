"""A Python adapter that computes nothing (zeros, LSE = 0), for bench_python_bridge: the bridge's
per-call cost over bench/noop_plugin.c, the same nothing in process."""
import torch

from attnfuzz_py import Adapter


class NoOp(Adapter):
    name = "noop"
    contracts = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}

    def forward(self, p, q, k, v):
        return (torch.zeros(p.batch, p.heads_q, p.seq_q, p.head_dim_v, dtype=q.dtype),
                torch.zeros(p.batch, p.heads_q, p.seq_q))

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)


class NoOpSupports(NoOp):
    """NoOp with a supports() of its own, so that the bridge asks it (BM_SupportsRoundTrip)."""

    def supports(self, p):
        return None
