"""LibTorch's SDPA on nested tensors, probed without attnfuzz:
  causal       what is_causal means per sequence where a sequence has more keys than queries (or
               fewer), for each kernel that takes nested inputs;
  gaps         a nested view whose components are not back to back in their buffer (rows of NaN
               between sequences, as a view made by narrowing a larger buffer has);
  misaligned   a nested view whose components start 2 bytes past alignment (run alone: a fault
               ends the process's CUDA context);
  cudnn_grad   the cuDNN nested op's backward through autograd, and SDPA's experimental gate
               (TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED=1) with inputs that require grad;
  cudnn_bwd    the cuDNN nested backward op called directly with its forward's outputs, against
               float64 autograd per sequence: one sequence with more queries than keys under
               is_causal, two sequences with no mask;
  math         the math path's failures on sequences with no keys (CPU).

SDPA documents is_causal as the top-left aligned causal mask where Lq != Lkv ("the attention
masking has the form of the upper left causal bias"). Each kernel's nested forward is compared
with a float64 per-sequence reference under both alignments; the one it matches is printed.

  python3 torch_nested_sdpa_probe.py [causal|gaps|misaligned|cudnn_grad|math ...]
  (default: all but misaligned; a CUDA GPU for the fused kernels)
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
H, D = 2, 64


def reference(q, k, v, align):
    """q [H, Lq, D], k/v [H, Lkv, D], float64, causal aligned top-left or bottom-right."""
    lq, lk = q.shape[1], k.shape[1]
    s = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    i = torch.arange(lq).view(-1, 1)
    j = torch.arange(lk).view(1, -1)
    visible = (j >= 0) if align == "none" else (j <= i if align == "top_left" else j <= i + lk - lq)
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
    for name, out in fused_runs(q, k, v, is_causal=True).items():
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


def view_from_buffer(parts, gap, shift, device, dtype):
    """[L, H, D] components in one flat buffer: `gap` NaN rows after each but the last, every
    offset `shift` elements on; returned as [B, H, L, D]."""
    row = H * D
    offsets, at = [], shift
    for i, t in enumerate(parts):
        offsets.append(at)
        at += t.shape[1] * row + (gap * row if i + 1 < len(parts) else 0)
    buf = torch.full((at,), float("nan"), device=device, dtype=dtype)
    for off, t in zip(offsets, parts):
        buf[off:off + t.numel()] = t.transpose(0, 1).reshape(-1).to(device, dtype)
    sizes = torch.tensor([[t.shape[1], H, D] for t in parts])
    strides = torch.tensor([[row, D, 1] for _ in parts])
    nt = torch._nested_view_from_buffer(buf, sizes, strides, torch.tensor(offsets))
    return nt.transpose(1, 2)


def fused_runs(q, k, v, is_causal=False):
    """O of each kernel that takes nested inputs: flash and efficient through SDPA, cuDNN's op."""
    runs = {}
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        try:
            with sdpa_kernel(backend):
                runs[name] = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        except Exception as e:  # noqa: BLE001
            print(f"  {name}: refused: {str(e).splitlines()[0][:160]}")
    try:
        runs["cudnn (op)"] = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, is_causal, False)[0]
    except Exception as e:  # noqa: BLE001
        print(f"  cudnn (op): refused: {str(e).splitlines()[0][:160]}")
    return runs


def probe_gaps(device):
    lens_q, lens_k = [9, 14, 5], [12, 7, 20]
    qs = [torch.randn(H, l, D) for l in lens_q]
    ks = [torch.randn(H, l, D) for l in lens_k]
    vs = [torch.randn(H, l, D) for l in lens_k]
    for gap in (0, 4):
        q, k, v = (view_from_buffer(x, gap, 0, device, torch.bfloat16) for x in (qs, ks, vs))
        print(f"gap of {gap} NaN rows between sequences (contiguous: {q.transpose(1, 2).is_contiguous()}):")
        for name, out in fused_runs(q, k, v).items():
            for b, (oq, qq, kk, vv) in enumerate(zip(out.unbind(), qs, ks, vs)):
                got = oq.double().cpu()
                err = (got - reference(qq, kk, vv, "none")).abs().max().item()
                print(f"  {name}: sequence {b}: {int(got.isnan().sum())} NaN, max error {err:.3g}")


def probe_misaligned(device):
    qs = [torch.randn(H, l, D) for l in (9, 14)]
    q = view_from_buffer(qs, 0, 1, device, torch.bfloat16)
    print(f"misaligned: data_ptr % 16 = {q.transpose(1, 2).values().data_ptr() % 16 if hasattr(q, 'values') else '?'}")
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION)]:
        try:
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(q, q, q)
            torch.cuda.synchronize()
            print(f"  {name}: ran, {int(torch.cat([t.reshape(-1) for t in out.unbind()]).isnan().sum())} NaN")
        except Exception as e:  # noqa: BLE001
            print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")


def probe_cudnn_bwd(device):
    dtype = torch.float16
    cases = [([26], [18], True, 64), ([28, 23], [7, 5], False, 64), ([12, 12], [12, 12], True, 64)]
    cases += [([l], [k], False, d) for d in (8, 16, 32) for l, k in ((25, 15), (37, 49))]
    for lens_q, lens_k, causal, d in cases:
        qs = [torch.randn(H, l, d) for l in lens_q]
        ks = [torch.randn(H, l, d) for l in lens_k]
        vs = [torch.randn(H, l, d) for l in lens_k]
        dos = [torch.randn(H, l, d) for l in lens_q]
        q, k, v, do = (nested(x, device, dtype) for x in (qs, ks, vs, dos))
        r = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False)
        out, lse, cum_q, cum_k, max_q, max_k, seed, offset = r[:8]
        try:
            dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
                do, q, k, v, out, lse, seed, offset, None, cum_q, cum_k, max_q, max_k, 0.0, causal)
        except Exception as e:  # noqa: BLE001
            print(f"cudnn backward op D {d} Lq {lens_q} Lkv {lens_k} causal {causal}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        print(f"cudnn backward op D {d} Lq {lens_q} Lkv {lens_k} causal {causal}: dq {tuple(dq.shape)} nested {dq.is_nested}, "
              f"lse {tuple(lse.shape)}, cum_q {cum_q.tolist()}")
        starts = cum_q.tolist()
        for b, (qq, kk, vv, dd) in enumerate(zip(qs, ks, vs, dos)):
            leaves = [t.double().requires_grad_() for t in (qq, kk, vv)]
            for align in ("top_left", "bottom_right"):
                for t in leaves:
                    t.grad = None
                ref = reference(*leaves, align if causal else "none")
                ref.backward(dd.double())
                got = dq.double().cpu()[starts[b]:starts[b] + qq.shape[1]].transpose(0, 1) if not dq.is_nested else dq.unbind()[b].double().cpu()
                err = (got - leaves[0].grad).abs().max().item()
                print(f"  sequence {b}: dQ vs float64 ({align if causal else 'no mask'}): {int(got.isnan().sum())} NaN, max error {err:.3g}")
                if not causal:
                    break


def probe_cudnn_grad(device):
    lens = [7, 12]
    q = nested([torch.randn(H, l, D) for l in lens], device, torch.bfloat16).detach().requires_grad_()
    try:
        out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, q, q, None, True, 0.0, False, False)[0]
        out.backward(torch.ones_like(out))
        print("cudnn op backward through autograd: ran")
    except Exception as e:  # noqa: BLE001
        print(f"cudnn op backward through autograd: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    env = os.environ.get("TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED")
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(q, q, q)
        print(f"SDPA, cuDNN only, inputs requiring grad (TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED={env}): chosen")
        out.backward(torch.ones_like(out))
        print("  backward ran")
    except Exception as e:  # noqa: BLE001
        print(f"SDPA, cuDNN only, inputs requiring grad (TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED={env}): "
              f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")


if __name__ == "__main__":
    print("torch", torch.__version__)
    wanted = sys.argv[1:] or ["math", "causal", "gaps", "cudnn_grad", "cudnn_bwd"]
    if "math" in wanted:
        probe_math_zero_keys()
    if torch.cuda.is_available():
        print(torch.cuda.get_device_name())
        for name in ("causal", "gaps", "misaligned", "cudnn_grad", "cudnn_bwd"):
            if name in wanted:
                globals()["probe_" + name]("cuda")
