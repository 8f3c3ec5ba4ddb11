"""FlexAttention eager (torch 2.11): the backward fails once a score_mod's captured Python float
changes between calls. Plain PyTorch, nothing of attnfuzz.

    python flex_eager_softcap_backward.py          # CUDA if there is one, else the CPU

Eager flex_attention runs its autograd through an internal torch.compile (backend "eager").
The second call with a different softcap recompiles with the float made dynamic, and the
fake-tensor pass of the FlexAttention op raises PendingUnbackedSymbolNotFound. The same calls
with the softcap as a 0-d tensor work (last line).
"""
import warnings

import torch
import torch.nn.attention.flex_attention as fa

warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
dev = "cuda" if torch.cuda.is_available() else "cpu"
if dev == "cpu":  # eager flex refuses a CPU backward by this one check; its dense backward is device-generic
    fa._validate_device = lambda q, k, v: None


def call(cap, as_tensor=False, S=8):
    q, k, v = (torch.randn(1, 2, S, 16, device=dev, requires_grad=True) for _ in range(3))
    score_mod = None
    if cap is not None:
        c = torch.tensor(cap, device=dev) if as_tensor else cap

        def score_mod(s, b, h, q_idx, kv_idx):
            return c * torch.tanh(s / c)
    fa.flex_attention(q, k, v, score_mod=score_mod).sum().backward()


print("torch", torch.__version__, "on", dev)
for label, caps, as_tensor in [("softcap 5.0", [5.0], False), ("softcap 5.0, then 7.0", [5.0, 7.0], False),
                               ("no softcap, then 5.0", [None, 5.0], False), ("softcap 5.0, then 7.0, as tensors", [5.0, 7.0], True)]:
    torch._dynamo.reset()
    try:
        for c in caps:
            call(c, as_tensor)
        print(f"{label}: ok")
    except Exception as e:  # noqa: BLE001
        print(f"{label}: FAILS {type(e).__name__}: {str(e).splitlines()[0][:120]} ... "
              + ("PendingUnbackedSymbolNotFound" if "PendingUnbackedSymbolNotFound" in str(e) else ""))
