"""torch only: does F.scaled_dot_product_attention through the cuDNN kernel return NaN in dQ for
fp16 inputs with large scores and a float attn_mask (a score bias, -inf where causally masked),
as the harness saw for LibTorch's cuDNN op (ledger s49-torch-cudnn-dQ-nan-fp16-large-logits-bias:
120 NaN dQ elements; our own cuDNN frontend graph, the efficient kernel and the math path were
finite on the same inputs)? The case's shape and value distributions; each configuration prints
the NaN/Inf counts of O, dQ, dK, dV and the largest |dQ - dQ64| over the finite elements.
Controls: the efficient kernel with the same mask; cuDNN with is_causal and no bias; cuDNN with
the bias and no causal mask; Q with sigma 1 instead of 5.7.

    python3 cudnn_sdpa_fp16_bias_large_logits_nan.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
print(torch.__version__, "cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name())
B, H, S, D = 2, 2, 3776, 120
dev, dt = "cuda", torch.float16


def inputs(q_sigma):
    q = torch.randn(B, H, S, D, device=dev) * q_sigma
    k = torch.randn(B, H, S, D, device=dev)
    out = torch.rand(B, H, S, D, device=dev) < 0.05  # outliers of +-20 on 5% of K's elements
    k = torch.where(out, 20.0 * torch.sign(torch.randn_like(k)), k)
    v = torch.rand(B, H, S, D, device=dev) * 2 - 1
    bias = torch.randn(B, H, 1, S, device=dev) * 1.29
    do = torch.randn(B, H, S, D, device=dev)
    return q, k, v, bias, do


def run(kernel, q, k, v, do, mask, causal):
    q, k, v = (t.to(dt).detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel([kernel]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask.to(dt), is_causal=causal)
    o.backward(do.to(dt))
    torch.cuda.synchronize()
    return o.detach(), q.grad, k.grad, v.grad


def reference(q, k, v, do, mask, causal):
    q, k, v = (t.to(dt).double().detach().requires_grad_() for t in (q, k, v))
    m = None if mask is None else mask.to(dt).double()
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)
    o.backward(do.to(dt).double())
    return q.grad


causal_visible = torch.ones(S, S, dtype=torch.bool, device=dev).tril()
for name, kernel, q_sigma, with_bias, causal_in_mask in [
        ("cudnn, bias + causal as -inf, Q sigma 5.7", SDPBackend.CUDNN_ATTENTION, 5.66, True, True),
        ("efficient, the same", SDPBackend.EFFICIENT_ATTENTION, 5.66, True, True),
        ("cudnn, is_causal, no bias", SDPBackend.CUDNN_ATTENTION, 5.66, False, True),
        ("cudnn, bias, no causal mask", SDPBackend.CUDNN_ATTENTION, 5.66, True, False),
        ("cudnn, bias + causal as -inf, Q sigma 1", SDPBackend.CUDNN_ATTENTION, 1.0, True, True)]:
    torch.manual_seed(1)
    q, k, v, bias, do = inputs(q_sigma)
    if with_bias:
        mask = bias.expand(B, H, S, S)
        if causal_in_mask:
            mask = mask.masked_fill(~causal_visible, float("-inf"))
        causal = False
    else:
        mask, causal = None, causal_in_mask
    try:
        outs = run(kernel, q, k, v, do, mask, causal)
    except Exception as e:  # a kernel that refuses the configuration
        print(f"{name}: ERROR {str(e).splitlines()[0][:150]}")
        continue
    bad = [int((~torch.isfinite(t)).sum()) for t in outs]
    dq64 = reference(q, k, v, do, mask, causal)
    fin = torch.isfinite(outs[1])
    err = (outs[1].double() - dq64)[fin].abs().max().item()
    print(f"{name}: non-finite O {bad[0]}, dQ {bad[1]}, dK {bad[2]}, dV {bad[3]}; max |dQ - dQ64| (finite) {err:.3e}, max |dQ64| {dq64.abs().max().item():.3e}")
