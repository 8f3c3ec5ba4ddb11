"""Flash SDPA on views whose rows are not 16-byte aligned: `CUDA error: misaligned address` (F-2, docs/findings/README.md)

Standalone: plain PyTorch on a CUDA GPU, nothing from attnfuzz. It calls
torch.nn.functional.scaled_dot_product_attention under sdpa_kernel([SDPBackend.FLASH_ATTENTION])
with Q, K, V, dO that are legal views of padded buffers (last dimension contiguous, row stride
not a multiple of 16 bytes), the case of docs/findings/repro/F-2-*.json: bf16, B=1 H=1 Sq=1
Skv=2 D=8, BHSD, 6 elements of row padding (28-byte rows), no mask. Before the call it asks
LibTorch's own checks whether the flash kernel accepts these inputs:
torch.backends.cuda.can_use_flash_attention(SDPAParams(...), debug=True) and
torch._fused_sdp_choice(...) with only flash enabled (what F.scaled_dot_product_attention
would pick). Then forward and backward, O, dQ, dK, dV against a float64 reference, and whether
the process's CUDA context still works afterwards. The math path on the same inputs is the
control, and an aligned (contiguous) copy of the same values is the second one. Each
configuration runs in its own process: the fault is sticky and kills the CUDA context.

    python3 flash_unaligned_rows.py              # all configurations, ~15 s
    python3 flash_unaligned_rows.py --one NAME   # one configuration in this process

Result lines (grep '^RESULT'):
  RESULT config=C backend=flash|math step=forward|backward status=ok|error error="..." and, when
      ok after the backward, O_rms O_max O_nonfinite ... dV_nonfinite against float64
  RESULT config=C context_after=ok|dead   a small CUDA op after the kernel's calls
  CHECK config=C check=can_use_flash_attention|fused_sdp_choice value=... debug="warnings"
  INPUT config=C tensor=q|k|v|dO size stride storage_offset stride_bytes offset_bytes aligned16
  RESULT config=C backend=process status=child_failed rc=N   the child process itself died
"""
import json
import re
import subprocess
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNEL = ("flash", SDPBackend.FLASH_ATTENTION, "can_use_flash_attention")
NAMES = ("O", "dQ", "dK", "dV")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def lay(order="bhsd", rp=0, off=0):
    return {"order": order, "rp": rp, "off": off}


def cfg(dtype, b, h, sq, skv, d, q, v=None, seed=0):
    return {"dtype": dtype, "shape": (b, h, sq, skv, d), "layouts": {"q": q, "k": q, "v": v or q, "dO": q}, "seed": seed}


CONFIGS = {
    # repro/F-2-torch-flash-unaligned-rows-misaligned-address.json
    "f2_repro": cfg("bf16", 1, 1, 1, 2, 8, lay("bhsd", rp=6), seed=1),
    "f2_repro_aligned": cfg("bf16", 1, 1, 1, 2, 8, lay(), seed=1),
    "f2_fp16_bshd_pad6": cfg("fp16", 1, 2, 16, 16, 64, lay("bshd", rp=6), seed=2),
    "f2_fp16_bshd_pad6_aligned": cfg("fp16", 1, 2, 16, 16, 64, lay("bshd"), seed=2),
}


def place(sizes, layout):
    """attnfuzz's layouts: stride(D) = 1, the innermost of B/H/S gets w + row_padding, each outer
    one size * stride of the next."""
    x1, x2, x3 = ["bhs".index(c) for c in layout["order"][:3]]
    strides = [0, 0, 0, 1]
    strides[x3] = sizes[3] + layout["rp"]
    strides[x2] = sizes[x3] * strides[x3]
    strides[x1] = sizes[x2] * strides[x2]
    return strides, layout["off"], layout["off"] + sizes[x1] * strides[x1]


def make_view(val, layout):
    strides, off, extent = place(val.shape, layout)
    buf = torch.zeros(extent, dtype=val.dtype, device=val.device)
    view = buf.as_strided(val.shape, strides, off)
    view.copy_(val)
    return view


def describe(name, role, t):
    es = t.element_size()
    strided = [(n, st) for n, sz, st in zip("BHS", t.shape[:3], t.stride()[:3]) if sz > 1]
    aligned = all(st * es % 16 == 0 for _, st in strided) and t.storage_offset() * es % 16 == 0
    return (f"INPUT config={name} tensor={role} dtype={str(t.dtype)[6:]} size={tuple(t.shape)} "
            f"stride={tuple(t.stride())} storage_offset={t.storage_offset()} "
            f"stride_bytes={','.join(f'{n}:{st * es}' for n, st in strided) or '-'} "
            f"offset_bytes={t.storage_offset() * es} ptr_mod16={t.data_ptr() % 16} aligned16={aligned}")


def short(e):
    return json.dumps(" ".join(str(e).split())[:240])


def reference(vals, scale):
    q, k, v = (vals[r].double().requires_grad_(True) for r in ("q", "k", "v"))
    o = torch.softmax(scale * q @ k.transpose(-1, -2), -1) @ v
    return [o.detach()] + list(torch.autograd.grad(o, (q, k, v), vals["dO"].double()))


def errors(out, ref):
    parts = []
    for n, x, r in zip(NAMES, out, ref):
        e = x.double() - r
        fin = torch.isfinite(e)
        mx = float(e[fin].abs().max()) if fin.any() else float("nan")
        parts.append(f"{n}_rms={float(e.pow(2).mean().sqrt()):.3e} {n}_max={mx:.3e} {n}_nonfinite={int((~fin).sum())}")
    return " ".join(parts)


def context_ok():
    try:
        torch.cuda.synchronize()
        return torch.zeros(2, device="cuda").add_(1).sum().item() == 2.0
    except Exception:  # noqa: BLE001
        return False


def checks(name, q, k, v):
    fn = getattr(torch.backends.cuda, KERNEL[2], None)
    if fn is None or not hasattr(torch.backends.cuda, "SDPAParams"):
        print(f"CHECK config={name} check={KERNEL[2]} value=unavailable")
    else:
        try:
            try:
                params = torch.backends.cuda.SDPAParams(q, k, v, None, 0.0, False, False)
            except TypeError:
                params = torch.backends.cuda.SDPAParams(q, k, v, None, 0.0, False)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                ok = fn(params, True)
            why = " | ".join(" ".join(str(x.message).split())[:160] for x in w)
            print(f"CHECK config={name} check={KERNEL[2]} value={ok} debug={json.dumps(why)}")
        except Exception as e:  # noqa: BLE001
            print(f"CHECK config={name} check={KERNEL[2]} value=error error={short(e)}")
    try:
        with sdpa_kernel([KERNEL[1]]):
            choice = torch._fused_sdp_choice(q, k, v, None, 0.0, False)
        try:
            choice = SDPBackend(choice).name
        except Exception:  # noqa: BLE001
            pass
        print(f"CHECK config={name} check=fused_sdp_choice value={choice} (only {KERNEL[0]} enabled)")
    except Exception as e:  # noqa: BLE001
        print(f"CHECK config={name} check=fused_sdp_choice value=error error={short(e)}")
    sys.stdout.flush()


def one(name):
    c = CONFIGS[name]
    b, h, sq, skv, d = c["shape"]
    dtype = DTYPES[c["dtype"]]
    g = torch.Generator().manual_seed(2000 + c["seed"])
    sizes = {"q": (b, h, sq, d), "k": (b, h, skv, d), "v": (b, h, skv, d), "dO": (b, h, sq, d)}
    vals = {r: torch.randn(s, generator=g).to(dtype).cuda() for r, s in sizes.items()}
    scale = d ** -0.5
    ref = reference(vals, scale)
    views = {r: make_view(vals[r], c["layouts"][r]) for r in sizes}
    for r, t in views.items():
        print(describe(name, r, t))
    q, k, v = (views[r].requires_grad_(True) for r in ("q", "k", "v"))
    checks(name, q, k, v)
    for label, backend in ((KERNEL[0], KERNEL[1]), ("math", SDPBackend.MATH)):
        if not context_ok():
            print(f"RESULT config={name} backend={label} status=skipped error=\"CUDA context unusable\"")
            continue
        step = "forward"
        try:
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(q, k, v, scale=scale)
            torch.cuda.synchronize()
            print(f"RESULT config={name} backend={label} step=forward status=ok")
            step = "backward"
            grads = torch.autograd.grad(o, (q, k, v), views["dO"])
            torch.cuda.synchronize()
            print(f"RESULT config={name} backend={label} step=backward status=ok {errors([o.detach()] + list(grads), ref)}")
        except Exception as e:  # noqa: BLE001
            print(f"RESULT config={name} backend={label} step={step} status=error error={short(e)}")
        if label == KERNEL[0]:
            print(f"RESULT config={name} context_after={'ok' if context_ok() else 'dead'}")
        sys.stdout.flush()


def main():
    print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(),
          "GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
    print(f"VERSIONS torch={torch.__version__} cuda={torch.version.cuda} cudnn={torch.backends.cudnn.version()} "
          f"gpu={json.dumps(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')}")
    rows = []
    for name in CONFIGS:
        print(f"--- {name} (own process)")
        try:
            p = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, timeout=120)
            out, rc, err = p.stdout, p.returncode, p.stderr
        except subprocess.TimeoutExpired as e:
            out, rc, err = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(), "timeout", ""
        if rc != 0:
            tail = " ".join(" ".join(x.split()) for x in (err or "").strip().splitlines()[-3:])
            out += f"RESULT config={name} backend=process status=child_failed rc={rc} error={json.dumps(tail[-300:])}\n"
        print(out.rstrip())
        rows.append((name, out))
    print(f"\nSummary ({KERNEL[0]} kernel; math = the math path on the same inputs)")
    print(f"{'config':28s} {'LibTorch check':16s} {'choice':20s} {KERNEL[0] + ' result':60s} context  math O/dQ rms")
    for name, out in rows:
        kv = {}
        for line in out.splitlines():
            m = dict((a, json.loads(b) if b.startswith('"') else b)
                     for a, b in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', line))
            if line.startswith("CHECK"):
                kv[m.get("check")] = m.get("value")
            elif line.startswith("RESULT") and "context_after" in m:
                kv["ctx"] = m["context_after"]
            elif line.startswith("RESULT"):
                if m.get("status") == "error" or m.get("step") == "backward" or m.get("status") == "child_failed":
                    kv.setdefault(m.get("backend"), m)
        res = kv.get(KERNEL[0]) or kv.get("process") or {}
        if res.get("status") == "ok":
            txt = f"ok: O rms {float(res['O_rms']):.2e}, dQ {float(res['dQ_rms']):.2e}"
        else:
            txt = f"{res.get('step', '')} {res.get('error', 'no result')}"[:60]
        mres = kv.get("math") or {}
        mtxt = f"{float(mres['O_rms']):.1e}/{float(mres['dQ_rms']):.1e}" if mres.get("status") == "ok" else mres.get("status", "-")
        print(f"{name:28s} {str(kv.get(KERNEL[2], '-')):16s} {str(kv.get('fused_sdp_choice', '-')):20s} {txt:60s} "
              f"{kv.get('ctx', '-'):8s} {mtxt}")


if __name__ == "__main__":
    if "--one" in sys.argv:
        one(sys.argv[sys.argv.index("--one") + 1])
    else:
        main()
    sys.exit(0)
