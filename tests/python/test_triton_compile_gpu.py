"""TritonFlash on a GPU (python/attnfuzz_py/adapters/triton_flash.py): Triton's JIT compiles are
compile time, apart from run time. The first forward and backward of a shape compile (compiles
counted, compile_s > 0, a "compiling" notice sent), the same shape again compiles nothing, and
the results match the float64 Minimal adapter. Skips (exit 77) without CUDA or Triton.
    python test_triton_compile_gpu.py PACKAGE_DIR
"""
import sys

sys.path.insert(0, sys.argv[1])

try:
    import numpy as np
    import torch
    import triton  # noqa: F401
except ImportError as e:
    print(f"SKIP: {sys.executable} has no torch/triton ({e})")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: no CUDA device: TritonFlash's compiles run on a GPU only (test_compile_time.py checks the hooks on the CPU)")
    sys.exit(77)

from attnfuzz_py import Problem, compile_time  # noqa: E402
from attnfuzz_py.adapters.minimal import Minimal  # noqa: E402
from attnfuzz_py.adapters.triton_flash import TritonFlash  # noqa: E402

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)
    else:
        print("ok:", what)


class Channel:
    def __init__(self):
        self.frames = []

    def progress(self, payload):
        self.frames.append(payload.decode())


channel = Channel()
compile_time.attach(channel)

b, h, s, d = 1, 2, 48, 32
rng = np.random.default_rng(0)
mask = np.tril(np.ones((s, s), np.uint8))[None, None].repeat(h, 1).copy()
p = Problem(dict(batch=b, heads_q=h, heads_kv=h, seq_q=s, seq_kv=s, head_dim_qk=d, head_dim_v=d, dtype="fp32", scale=d ** -0.5,
                 softcap=None, mask={"kind": "causal", "align": "top_left"}, q_offset=0, kv_offset=0, full_seq_q=s, full_seq_kv=s,
                 restrictions=[]), mask)
cpu = [torch.from_numpy(rng.standard_normal((b, h, s, d)).astype(np.float32)) for _ in range(3)]
q, k, v = (x.cuda() for x in cpu)
a = TritonFlash(device="cuda")
check(a.supports(p) is None, f"TritonFlash runs the problem: {a.supports(p)}")

stats = []
for _ in range(2):
    o, lse = a.forward(p, q, k, v)
    stats.append(a.stats())
print("forward stats:", stats)
check(stats[0]["compiles"] >= 1 and stats[0]["compile_s"] > 0, "the first forward's compile is counted as compile time")
check(stats[1]["compiles"] == 0 and stats[1]["compile_s"] == 0, "the same shape again compiles nothing")
check(stats[1]["run_s"] < stats[0]["compile_s"], "run time is not the compile's")
check(any(f.startswith("compiling") for f in channel.frames), f"a compiling notice was sent: {channel.frames[:3]}")

d_o, d_lse = torch.randn_like(o), torch.randn_like(lse)
stats = []
for _ in range(2):
    grads = a.backward(p, q, k, v, o, lse, d_o, d_lse)
    stats.append(a.stats())
print("backward stats:", stats)
check(stats[0]["compiles"] >= 2, "the first backward's two kernels are compiled, and counted")
check(stats[1]["compiles"] == 0, "the second backward compiles nothing")

exact = Minimal()
o_ref, lse_ref = exact.forward(p, *cpu)
check(torch.allclose(o.cpu().double(), o_ref, atol=1e-4), "O matches the float64 reference")
g_ref = exact.backward(p, *cpu, o_ref.float(), lse_ref.float(), d_o.cpu(), d_lse.cpu())
check(all(torch.allclose(g.cpu().double(), r, atol=1e-3) for g, r in zip(grads, g_ref)), "dQ, dK, dV match the float64 reference")

# Another shape in the same head-dim blocks, with odd sizes and a view at an odd offset (strides
# and alignment no longer divisible by 16): the kernels are not specialized on argument values,
# so nothing compiles again, and the results are still right.
b2, s2, d2 = 2, 37, 31
mask2 = np.tril(np.ones((s2, s2), np.uint8))[None, None].repeat(b2 * h, 0).reshape(b2, h, s2, s2).copy()
p2 = Problem(dict(batch=b2, heads_q=h, heads_kv=h, seq_q=s2, seq_kv=s2,
             head_dim_qk=d2, head_dim_v=d2, dtype="fp32", scale=d2 ** -0.5, softcap=None,
             mask={"kind": "causal", "align": "top_left"}, q_offset=0, kv_offset=0, full_seq_q=s2, full_seq_kv=s2,
             restrictions=[]), mask2)
cpu2 = [torch.from_numpy(rng.standard_normal((b2, h, s2, d2)).astype(np.float32)) for _ in range(3)]
q2, k2, v2 = (torch.empty(b2 * h * s2 * d2 + 3, device="cuda")[3:].view(b2, h, s2, d2).copy_(x) for x in cpu2)
o2, lse2 = a.forward(p2, q2, k2, v2)
g2 = a.backward(p2, q2, k2, v2, o2, lse2, torch.randn_like(o2), torch.randn_like(lse2))
st = a.stats()
check(st["compiles"] == 0, f"another shape, odd strides and an unaligned view compile nothing: {st}")
o2_ref, _ = exact.forward(p2, *cpu2)
check(torch.allclose(o2.cpu().double(), o2_ref, atol=1e-4), "O of the second shape matches the float64 reference")

print("triton compile time (GPU):", "all checks passed" if not failures else f"{len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
