"""Test adapters: the minimal adapter with O moved up by one fp32 ulp when its call holds more
than two batches, as a kernel whose split heuristic reads the batch size does. `BatchKeyedDeclared`
declares batch invariance: the batch-invariance check must report O; `BatchKeyedUndeclared`
promises nothing: no finding (tests/batch_invariance_test.sh)."""
import torch

from attnfuzz_py.adapters.minimal import Minimal


class _BatchKeyed(Minimal):
    def forward(self, p, q, k, v):
        o, lse = super().forward(p, q, k, v)
        if p.batch > 2:
            o = o.float()
            o = torch.nextafter(o, torch.full_like(o, float("inf")))
        return o, lse


class BatchKeyedDeclared(_BatchKeyed):
    name = "batch_keyed_declared"
    batch_invariant = True


class BatchKeyedUndeclared(_BatchKeyed):
    name = "batch_keyed_undeclared"
