"""FlexCompiled's bucketed shapes (python/attnfuzz_py/adapters/flex_buckets.py) change nothing but
the shape: eager flex_attention on the padded problem gives the float64 Minimal adapter's O, LSE,
dQ, dK, dV of the unpadded one (to fp32 rounding), for GQA groups of 1 to 3, head dims below and above 16, Dqk != Dv, softcaps,
score biases (broadcast over some of B, H, Sq, Skv, or none), a given scale, fully masked rows and a dLSE. (The compiled kernel itself runs on CUDA only.)
FlexEager too, on the same problems: two softcaps in a row once made its backward fail inside
torch (a captured Python float; docs/findings/README.md).
    python test_flex_buckets.py PACKAGE_DIR
"""
import sys

sys.path.insert(0, sys.argv[1])

try:
    import numpy as np
    import torch
    import torch.nn.attention.flex_attention as fa
except ImportError as e:
    print(f"SKIP: {sys.executable} has no torch/numpy ({e}; run ci/setup.sh)")
    sys.exit(77)

from attnfuzz_py import Problem  # noqa: E402
from attnfuzz_py.adapters import flex_buckets  # noqa: E402
from attnfuzz_py.adapters.flex import FlexEager, _cpu_backward_allowed  # noqa: E402
from attnfuzz_py.adapters.minimal import Minimal  # noqa: E402


def problem(b, hkv, g, sq, skv, dqk, dv, softcap, scale, bias_spans, rng):
    mask = (rng.random((b, hkv * g, sq, skv)) < 0.7).astype(np.uint8)
    mask[0, 0, 0, :] = 0  # a fully masked row: O = 0, LSE = -inf, no gradient
    fields = dict(batch=b, heads_q=hkv * g, heads_kv=hkv, seq_q=sq, seq_kv=skv, head_dim_qk=dqk, head_dim_v=dv, dtype="fp32",
                  scale=scale if scale else dqk ** -0.5, softcap=softcap, mask={"kind": "random", "density": 0.7, "seed": 1},
                  q_offset=0, kv_offset=0, full_seq_q=sq, full_seq_kv=skv, restrictions=[])
    bias = None
    if bias_spans is not None:  # which of (B, Hq, Sq, Skv) the bias spans; extent 1 (broadcast) elsewhere
        shape = tuple(n if span else 1 for n, span in zip((b, hkv * g, sq, skv), bias_spans))
        bias = torch.from_numpy(rng.normal(0.0, 2.0, shape).astype(np.float32))
    return Problem(fields, mask, bias)


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    exact = Minimal()
    eager = FlexEager(device="cpu")
    worst, cases = 0.0, 0
    for (b, hkv, g, sq, skv, dqk, dv, softcap, scale, bias) in [
            (1, 1, 1, 5, 7, 6, 6, None, None, None), (2, 2, 3, 9, 4, 16, 5, 3.5, None, None),
            (1, 3, 2, 17, 33, 20, 40, None, 0.3, None), (2, 1, 4, 1, 3, 33, 16, 10.0, 0.9, None),
            (1, 5, 1, 3, 3, 1, 2, None, None, None),
            (2, 2, 3, 9, 4, 16, 5, 3.5, None, (1, 1, 1, 1)), (2, 2, 2, 6, 11, 8, 8, None, None, (0, 1, 0, 1)),
            (3, 1, 2, 5, 5, 4, 4, 2.0, 0.5, (1, 0, 1, 0)), (1, 2, 1, 7, 3, 8, 8, None, None, (0, 0, 0, 0))]:
        p = problem(b, hkv, g, sq, skv, dqk, dv, softcap, scale, bias, rng)
        q = torch.randn(b, hkv * g, sq, dqk)
        k = torch.randn(b, hkv, skv, dqk)
        v = torch.randn(b, hkv, skv, dv)
        d_o, d_lse = torch.randn(b, hkv * g, sq, dv), torch.randn(b, hkv * g, sq)
        want = [x.float() for x in exact.forward(p, q, k, v)]
        got = list(flex_buckets.forward(fa.flex_attention, p, q, k, v, "cpu"))
        want += [x.float() for x in exact.backward(p, q, k, v, want[0], want[1], d_o, d_lse)]
        with _cpu_backward_allowed():
            got += list(flex_buckets.backward(fa.flex_attention, torch.autograd.grad, p, q, k, v, d_o, d_lse, "cpu"))
        flex_eager = list(eager.forward(p, q, k, v))
        flex_eager += list(eager.backward(p, q, k, v, flex_eager[0], flex_eager[1], d_o, d_lse))
        pairs = [(f"{n} (buckets)", w, x) for n, w, x in zip(["O", "LSE", "dQ", "dK", "dV"], want, got)]
        pairs += [(f"{n} (FlexEager)", w, x) for n, w, x in zip(["O", "LSE", "dQ", "dK", "dV"], want, flex_eager)]
        for name, w, x in pairs:
            if w.shape != x.shape:
                print(f"FAIL {name} shape {tuple(x.shape)}, expected {tuple(w.shape)} (problem {b, hkv, g, sq, skv, dqk, dv})")
                return 1
            finite = torch.isfinite(w)
            if not torch.equal(finite, torch.isfinite(x)) or not torch.equal(w[~finite], x[~finite]):
                print(f"FAIL {name}: the infinite entries differ (problem {b, hkv, g, sq, skv, dqk, dv})")
                return 1
            err = (w[finite] - x[finite]).abs().max().item() if finite.any() else 0.0
            worst = max(worst, err / max(1.0, w[finite].abs().max().item() if finite.any() else 1.0))
            if err > 2e-5 * max(1.0, w[finite].abs().max().item()):
                print(f"FAIL {name}: max difference {err:.3g} (problem {b, hkv, g, sq, skv, dqk, dv})")
                return 1
        cases += 1
    print(f"flex buckets: {cases} problems (4 with a bias), padded flex_attention and FlexEager = float64 within {worst:.2g} (relative), O LSE dQ dK dV")
    return 0


sys.exit(main())
