"""Test adapters: the minimal adapter with dK and dV that differ in their last bit from run to
run, as a backward accumulating them with atomic adds does. `AtomicDeclared` declares it
(nondeterministic_outputs): no determinism finding may be reported; `AtomicUndeclared` does
not: the determinism check must report dK and dV (tests/nondeterminism_declared_test.sh)."""
import torch

from attnfuzz_py.adapters.minimal import Minimal


class _AtomicOrder(Minimal):
    def __init__(self, **options):
        super().__init__(**options)
        self._calls = 0
        self._rng = torch.Generator().manual_seed(12345)

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        dq, dk, dv = super().backward(p, q, k, v, o, lse, d_o, d_lse)
        self._calls += 1

        def jitter(x):  # at most one ulp of fp32 up, on a random half of the elements
            x = x.float()
            up = torch.nextafter(x, torch.full_like(x, float("inf")))
            pick = (torch.rand(x.shape, generator=self._rng) < 0.5) & (x != 0) & torch.isfinite(x)
            return torch.where(pick, up, x)

        return dq, jitter(dk), jitter(dv)


class AtomicDeclared(_AtomicOrder):
    name = "atomic_declared"
    nondeterministic_outputs = ("dK", "dV")
    why_nondeterministic = "dK and dV accumulated with atomic adds"


class AtomicUndeclared(_AtomicOrder):
    name = "atomic_undeclared"


class BadDeclaration(Minimal):
    name = "bad_declaration"
    nondeterministic_outputs = ("dK", "dX")
