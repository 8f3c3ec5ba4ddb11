"""LibTorch 2.11 on the CPU: does an fp32 softcapped attention forward give the same LSE in every
process? Plain PyTorch, no attnfuzz code. LEDGER row `s54-torch-cpu-fp32-lse-process-flaky`.

    for i in $(seq 1 150); do python3 torch_cpu_fp32_softcap_lse_flaky.py; done | sort | uniq -c

Each process computes the same fp32 forward (scores, softcap, logsumexp, P V) on the same inputs
and prints the LSE's RMS error against float64 and a hash of its LSE and O bits. A deterministic
library prints one line 150 times. Inputs: B = 2, H = 1, Sq = 6, Skv = 256, D = 32, Dv = 160, Q
normal with 5% outliers of +-20, K 0.7 N(0, 1), V 0.1 + 0.001 N(0, 1), softcap 5.816 (the shape of
attnfuzz's case 540048, where torch.math's fp32 LSE read 6.2e-5 in a few processes).
"""
import hashlib

import torch

torch.manual_seed(0)
B, H, Sq, Skv, D, Dv = 2, 1, 6, 256, 32, 160
q = torch.randn(B, H, Sq, D, dtype=torch.float64)
m = torch.rand(B, H, Sq, D) < 0.05
q[m] = 20.0 * torch.sign(torch.randn(int(m.sum()), dtype=torch.float64))
k = 0.7 * torch.randn(B, H, Skv, D, dtype=torch.float64)
v = 0.1 + 0.001 * torch.randn(B, H, Skv, Dv, dtype=torch.float64)
cap, scale = 5.816307142883872, D**-0.5
qf, kf, vf = q.float(), k.float(), v.float()
s = torch.matmul(qf, kf.transpose(-2, -1)) * scale
s = torch.tanh(s / cap) * cap
lse = torch.logsumexp(s, -1, keepdim=True)
o = torch.matmul(torch.exp(s - lse), vf)
lse64 = torch.logsumexp(torch.tanh((q @ k.transpose(-2, -1)) * scale / cap) * cap, -1)
err = (lse.squeeze(-1).double() - lse64).pow(2).mean().sqrt().item()
print(f"LSE rms error {err:.4e} bits {hashlib.md5(lse.numpy().tobytes() + o.numpy().tobytes()).hexdigest()[:8]} threads {torch.get_num_threads()} torch {torch.__version__}")
