"""torch.compile(flex_attention, dynamic=True) with backed_size_oblivious (torch 2.11, CUDA): the
backward of a second sequence length fails an assert_size_stride that holds the first call's
strides. Without backed_size_oblivious the same calls pass. Plain PyTorch.

    python flex_compiled_dynamic_backward_strides.py

Seen by attnfuzz's FlexCompiled with dynamic shapes on the H200: "AssertionError: expected size
4==4, stride 192==208 at dim=1" (S = 12 after S = 13, D = 16), in every case whose composition
calls the kernel at two sequence lengths. On the H200 (2026-11-30):
    backed_size_oblivious=True: ok for S = [13], then FAILS AssertionError: expected size 4==4, stride 192==208 at dim=1
    backed_size_oblivious=False: S = 13, 12, 40 all ok
"""
import warnings

import torch
import torch.nn.attention.flex_attention as fa

warnings.simplefilter("ignore")
torch.fx.experimental._config.backed_size_oblivious = True  # as FlexCompiled had it; without it too, below
f = torch.compile(fa.flex_attention, fullgraph=True, dynamic=True)


def train(S, H=4, D=16):
    q, k, v = (torch.randn(1, H, S, D, device="cuda", requires_grad=True) for _ in range(3))
    out, aux = f(q, k, v, return_aux=fa.AuxRequest(lse=True))
    torch.autograd.grad([out, aux.lse], [q, k, v], [torch.randn_like(out), torch.randn_like(aux.lse)])


print("torch", torch.__version__)
for oblivious in (True, False):
    torch.fx.experimental._config.backed_size_oblivious = oblivious
    torch._dynamo.reset()
    done = []
    try:
        for S in (13, 12, 40):
            train(S)
            done.append(S)
        print(f"backed_size_oblivious={oblivious}: S = 13, 12, 40 all ok")
    except Exception as e:  # noqa: BLE001
        print(f"backed_size_oblivious={oblivious}: ok for S = {done}, then FAILS {type(e).__name__}: {str(e).splitlines()[0][:160]}")
