"""LibTorch's cuDNN attention with a float attn_mask: does the graph execute?

Standalone: torch only, no attnfuzz code. A stop-52 campaign finding (torch.cudnn, fp16, B = 1,
Hq = 3 over Hkv = 1, Sq = 1539, Skv = 1613, D = 128, a composed boolean mask handed over as an
additive float mask, V with a share of subnormal values) raised "Expected
mha_graph.execute(handle, variant_pack, workspace_ptr.get()).is_good() to be true" from the
public entry point, every time, alone on the GPU. This runs the public entry point,
torch.nn.functional.scaled_dot_product_attention under SDPBackend.CUDNN_ATTENTION, forward and
backward, on that shape and on controls: an aligned Skv (1616), no mask, V without subnormals.

    python3 cudnn_sdpa_float_mask_execute.py
"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def case(skv, mask, subnormal_v, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    b, hq, sq, d = 1, 3, 1539, 128
    q = torch.randn(b, hq, sq, d, device="cuda", generator=g, dtype=torch.float16)
    k = torch.randn(b, 1, skv, d, device="cuda", generator=g, dtype=torch.float16).repeat_interleave(hq, 1)
    v = torch.randn(b, 1, skv, d, device="cuda", generator=g, dtype=torch.float16)
    if subnormal_v:
        pick = torch.rand(v.shape, device="cuda", generator=g) < 0.05
        v = torch.where(pick, (torch.rand(v.shape, device="cuda", generator=g) * 6e-5).half(), v)
    v = v.repeat_interleave(hq, 1)
    bias = None
    if mask:
        keep = torch.rand(b, hq, sq, skv, device="cuda", generator=g) < 0.3
        keep[..., 0] = True
        bias = torch.zeros(b, hq, sq, skv, device="cuda", dtype=torch.float16).masked_fill(~keep, float("-inf"))
    return q, k, v, bias


def run(skv, mask, subnormal_v):
    q, k, v, bias = case(skv, mask, subnormal_v)
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    tag = f"Skv={skv} mask={'float' if mask else 'none':5s} subnormal_v={subnormal_v!s:5s}"
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            torch.cuda.synchronize()
            fwd = "forward ok"
            o.backward(torch.randn_like(o))
            torch.cuda.synchronize()
        print(f"{tag} | {fwd}, backward ok, finite: {bool(torch.isfinite(q.grad).all())}")
    except Exception as e:  # noqa: BLE001
        where = "backward" if "fwd" in locals() else "forward"
        print(f"{tag} | {where} raised: {str(e).splitlines()[0][:140]}")


def main():
    print(f"torch {torch.__version__} cuda {torch.version.cuda} cudnn {torch.backends.cudnn.version()} {torch.cuda.get_device_name()}")
    for skv, mask, sub in ((1613, True, True), (1613, True, False), (1616, True, True), (1613, False, True), (1616, True, False)):
        run(skv, mask, sub)


if __name__ == "__main__":
    main()
