"""Which head dims torch.compile(flex_attention) lowers on this GPU (issue 13 triage: the
NoValidChoicesError at Dqk=256, Dv=137 bf16, and Dv = 256). Plain PyTorch: forward + backward,
causal, B=1 H=2 S=48, contiguous inputs, static shapes; edit the list below.

On the H200 (torch 2.11.0+cu130, 2026-11-30), bf16: (256, 137), (256, 256), (256, 128), (137, 137),
(192, 192), (64, 256), (16, 256) compile forward and backward; (128, 256) compiles the forward,
and its backward fails: "No valid triton configs. OutOfMemoryError: out of resource:
triton_tem_fused_flex_attention_backward_mul_1 Required: 246784 Hardware limit:232448"."""
import itertools
import time
import traceback

import torch
import torch.nn.attention.flex_attention as fa

torch._dynamo.config.recompile_limit = 1 << 10
f = torch.compile(fa.flex_attention, fullgraph=True, dynamic=False)


def causal(b, h, q, kv):
    return kv <= q


for dt, (dqk, dv) in itertools.product([torch.float32, torch.float16], [(128, 256), (256, 256), (64, 256), (256, 128)]):
    S = 48
    q = torch.randn(1, 2, S, dqk, device="cuda", dtype=dt, requires_grad=True)
    k = torch.randn(1, 2, S, dqk, device="cuda", dtype=dt, requires_grad=True)
    v = torch.randn(1, 2, S, dv, device="cuda", dtype=dt, requires_grad=True)
    bm = fa.create_block_mask(causal, None, None, S, S, device="cuda")
    t0 = time.time()
    for stage in ("forward", "backward"):
        try:
            if stage == "forward":
                out, aux = f(q, k, v, block_mask=bm, return_aux=fa.AuxRequest(lse=True))
            else:
                torch.autograd.grad([out, aux.lse], [q, k, v], [torch.randn_like(out), torch.randn_like(aux.lse)])
            torch.cuda.synchronize()
            print(f"{str(dt)[6:]:8} Dqk={dqk} Dv={dv} {stage}: ok ({time.time() - t0:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001
            msg = traceback.format_exception_only(type(e), e)[-1].strip().splitlines()[0][:220]
            print(f"{str(dt)[6:]:8} Dqk={dqk} Dv={dv} {stage}: FAILS {msg}", flush=True)
            break
