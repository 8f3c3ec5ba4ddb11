"""torch only: does F.scaled_dot_product_attention through the cuDNN kernel give bitwise-different
O, dQ, dK or dV for identical inputs when there is one query row (decode), as the harness saw for
LibTorch's cuDNN op (ledger s49-torch-cudnn-decode-forward-nondeterministic-fp16) and our cudnn
backend (open-cudnn-forward-LSE-nondeterministic-sq1-bf16)? Controls: 4 and 64 query rows.
Prints, per shape, how many elements of each output differ from the first run over 20 reruns.

    python3 cudnn_sdpa_decode_nondeterminism.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
print(torch.__version__, "cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name())


def run(q, k, v, do):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        o = F.scaled_dot_product_attention(q, k, v)
    o.backward(do)
    return [o.detach(), q.grad, k.grad, v.grad]


# (Sq, Skv, Hq, Hkv, D, sigma of Q): the campaign's calls (a key split of Skv = 2623 at 1619 and
# 1922, GQA 6/3, Q with large logits), then plain decode shapes, then the controls.
shapes = [(1, 1619, 6, 3, 64, 5.2), (1, 303, 6, 3, 64, 5.2), (1, 701, 6, 3, 64, 5.2), (1, 2623, 6, 6, 64, 1.0),
          (1, 4096, 8, 8, 128, 1.0), (4, 2623, 6, 6, 64, 1.0), (64, 2623, 6, 6, 64, 1.0)]
for sq, skv, hq, hkv, d, q_sigma in shapes:
    q = (torch.randn(1, hq, sq, d, device="cuda") * q_sigma).half()
    k = torch.randn(1, hkv, skv, d, device="cuda").half().repeat_interleave(hq // hkv, 1)
    v = torch.randn(1, hkv, skv, d, device="cuda").half().repeat_interleave(hq // hkv, 1)
    do = torch.randn(1, hq, sq, d, device="cuda").half()
    first = run(q, k, v, do)
    moved = [0, 0, 0, 0]
    for _ in range(20):
        again = run(q, k, v, do)
        moved = [max(m, int((a != f).sum())) for m, a, f in zip(moved, again, first)]
    print(f"fp16 Sq={sq} Skv={skv} Hq={hq} Hkv={hkv} D={d}: elements differing from run 1 over 20 reruns: "
          f"O {moved[0]}, dQ {moved[1]}, dK {moved[2]}, dV {moved[3]}")
