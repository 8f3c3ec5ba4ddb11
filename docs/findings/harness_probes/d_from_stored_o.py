"""Harness triage probes (attnfuzz Python adapters, so not standalone): exact float64 attention whose
outputs are stored in the case dtype, and whose backward takes D = rowsum(dO * O)

  DStored  from the stored O (what a fused kernel does: its O is the one it wrote),
  DExact   from the exact O,

so that the difference between the two is the error that O's storage rounding sends into dS = P (dP - D)
and from there into every dQ, dK and dV element the query reaches. `QuerySources` is DStored that also
writes, per KV head and for one tile of dK (keys ATTNFUZZ_PROBE_KEYS, default 528-543, columns of
16 from each ATTNFUZZ_PROBE_COLS, default 0,80), how many queries that D error reaches the tile from:
the participation ratio (sum_i v_i)^2 / sum_i v_i^2 of the queries' variances v_i in the tile
(to ATTNFUZZ_PROBE_OUT, default stderr).

    PYTHONPATH=docs/findings/harness_probes:python ATTNFUZZ_PYTHON=.deps/pyenv/bin/python3 \
      build/cpu/attnfuzz run --no-determinism-check \
      --backends py:d_from_stored_o:DStored,py:d_from_stored_o:DExact,py:d_from_stored_o:QuerySources \
      docs/findings/open/s60-decode-dK-tile-bf16-q-outliers-cuda-flash-cudnn.min.json

No mask handling beyond Minimal's (the dense mask), no softcap chain change: Minimal's backward with
the O it is given.
"""
import os
import sys

import torch

from attnfuzz_py.adapters.minimal import Minimal

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class DStored(Minimal):
    name = "d_stored"
    contracts = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}
    exact_d = False

    def supports(self, p):
        return None

    def _exact_o(self, p, q, k, v):
        prob, _, _ = self._scores(p, q, k)
        return prob @ v.double().repeat_interleave(p.group, dim=1)

    def forward(self, p, q, k, v):
        prob, lse, _ = self._scores(p, q, k)
        o = prob @ v.double().repeat_interleave(p.group, dim=1)
        return o.to(_DTYPES[p.dtype]), lse.float()

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        o = self._exact_o(p, q, k, v) if self.exact_d else o.double()
        grads = super().backward(p, q, k, v, o, lse, d_o, d_lse)
        return tuple(g.to(_DTYPES[p.dtype]) for g in grads[:3])


class DExact(DStored):
    name = "d_exact"
    exact_d = True


class QuerySources(DStored):
    name = "query_sources"

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        prob, _, _ = self._scores(p, q, k)
        exact_o = prob @ v.double().repeat_interleave(p.group, dim=1)
        d_err = (d_o.double() * (o.double() - exact_o)).sum(-1)  # [B, Hq, Sq]: D's error from O's storage
        j0, j1 = (int(x) for x in os.environ.get("ATTNFUZZ_PROBE_KEYS", "528,544").split(","))
        cols = [int(x) for x in os.environ.get("ATTNFUZZ_PROBE_COLS", "0,80").split(",")]
        out = open(os.environ["ATTNFUZZ_PROBE_OUT"], "w") if "ATTNFUZZ_PROBE_OUT" in os.environ else sys.stderr
        for b in range(p.batch):
            for hk in range(p.heads_kv):
                heads = slice(hk * p.group, (hk + 1) * p.group)
                reached = int((d_o[b, heads].abs().sum(-1) > 0).sum())
                # dK_jd's part from query i: -scale P_ij dD_i Q_id; its square summed over the tile, per query.
                per_key = (p.scale * prob[b, heads, :, j0:j1] * d_err[b, heads, :, None]) ** 2  # [group, Sq, keys]
                per_col = per_key.sum(-1)[..., None] * q.double()[b, heads] ** 2  # [group, Sq, Dqk]
                for c0 in cols:
                    v_i = per_col[..., c0:c0 + 16].flatten()
                    v_i = v_i / v_i.max() if float(v_i.max()) > 0 else v_i  # squares of tiny variances underflow
                    ratio = float(v_i.sum() ** 2 / (v_i ** 2).sum()) if float(v_i.sum()) > 0 else 0.0
                    out.write(f"b{b} kv head {hk}: {reached} of {p.group * p.seq_q} queries with dO; dK keys {j0}-{j1 - 1}, "
                              f"columns {c0}-{c0 + 15}: D's error from {ratio:.2f} queries\n")
        if out is not sys.stderr:
            out.close()
        return super().backward(p, q, k, v, o, lse, d_o, d_lse)
