"""LibTorch's SDPA on nested tensors, probed without attnfuzz: what is_causal means per sequence
where a sequence has more keys than queries (or fewer), for each kernel that takes nested inputs,
and the math path's failures on sequences with no keys.

SDPA documents is_causal as the top-left aligned causal mask where Lq != Lkv ("the attention
masking has the form of the upper left causal bias"). Each kernel's nested forward is compared
with a float64 per-sequence reference under both alignments; the one it matches is printed.

  python3 torch_nested_sdpa_probe.py        (a CUDA GPU for the fused kernels; CPU part anywhere)
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
H, D = 2, 64


def reference(q, k, v, align):
    """q [H, Lq, D], k/v [H, Lkv, D], float64, causal aligned top-left or bottom-right."""
    lq, lk = q.shape[1], k.shape[1]
    s = (q.double() @ k.double().transpose(-1, -2)) / D**0.5
    i = torch.arange(lq).view(-1, 1)
    j = torch.arange(lk).view(1, -1)
    visible = j <= i if align == "top_left" else j <= i + lk - lq
    s = s.masked_fill(~visible.to(s.device), float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ v.double()


def nested(parts, device, dtype):
    # [L, H, D] components (packed rows), seen as [B, H, L, D]: what the fused nested paths take.
    return torch.nested.nested_tensor([t.transpose(0, 1).contiguous() for t in parts], device=device, dtype=dtype).transpose(1, 2)


def probe_causal(device):
    lens_q, lens_k = [5, 40, 17], [23, 40, 3]
    dtype = torch.bfloat16
    qs = [torch.randn(H, l, D) for l in lens_q]
    ks = [torch.randn(H, l, D) for l in lens_k]
    vs = [torch.randn(H, l, D) for l in lens_k]
    q, k, v = (nested(x, device, dtype) for x in (qs, ks, vs))
    runs = {}
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        try:
            with sdpa_kernel(backend):
                runs[name] = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        except Exception as e:  # noqa: BLE001
            print(f"{name}: refused: {str(e).splitlines()[0][:160]}")
    try:
        runs["cudnn (op)"] = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False)[0]
    except Exception as e:  # noqa: BLE001
        print(f"cudnn (op): refused: {str(e).splitlines()[0][:160]}")
    for name, out in runs.items():
        for b, (oq, qq, kk, vv) in enumerate(zip(out.unbind(), qs, ks, vs)):
            got = oq.double().cpu()
            errs = {a: (got - reference(qq, kk, vv, a)).abs().max().item() for a in ("top_left", "bottom_right")}
            near = min(errs, key=errs.get)
            print(f"{name}: sequence {b} (Lq {qq.shape[1]}, Lkv {kk.shape[1]}): max error top-left {errs['top_left']:.3g}, "
                  f"bottom-right {errs['bottom_right']:.3g} -> {near if errs[near] < 0.05 else 'neither'}")


def probe_math_zero_keys():
    # The math path on the CPU, fp32, [H, L, D] components; no mask.
    for lens_q, lens_k in [([22, 6], [0, 3]), ([3, 2], [0, 3]), ([3], [0])]:
        q = torch.nested.nested_tensor([torch.randn(H, l, 16) for l in lens_q])
        k = torch.nested.nested_tensor([torch.randn(H, l, 16) for l in lens_k])
        try:
            out = F.scaled_dot_product_attention(q, k, k)
            print(f"math cpu Lq {lens_q} Lkv {lens_k}: ok, {[tuple(t.shape) for t in out.unbind()]}")
        except Exception as e:  # noqa: BLE001
            print(f"math cpu Lq {lens_q} Lkv {lens_k}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


if __name__ == "__main__":
    print("torch", torch.__version__)
    probe_math_zero_keys()
    if torch.cuda.is_available():
        print(torch.cuda.get_device_name())
        probe_causal("cuda")
