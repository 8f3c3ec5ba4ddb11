"""A first look at FlashAttention-4 and FlashInfer on the GPU machine, before any attnfuzz run:
versions, then one tiny call of each on CUDA against float32 torch, with its compile time.

    . ci/thirdparty_unpack.sh && python3 ci/thirdparty_smoke.py      (ci/gpu_run.sh thirdparty runs it)

One line per check: "SMOKE <what> ok|FAIL ...". Exit status 0 when every library that imports
ran its calls; 1 otherwise.
"""
import importlib.metadata as md
import math
import subprocess
import sys
import time
import traceback

import torch


def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "absent"


def ref(q, k, v, scale, causal, window_left=None, softcap=0.0):
    """float32 attention, [B][H][S][D], bottom-right causal / left window: O and natural-log LSE."""
    g = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1)
    s = scale * q.float() @ k.transpose(-1, -2)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    sq, skv = q.shape[2], k.shape[2]
    i = torch.arange(sq, device=q.device)[:, None] + (skv - sq)
    j = torch.arange(skv, device=q.device)[None, :]
    vis = torch.ones(sq, skv, dtype=torch.bool, device=q.device)
    if causal:
        vis &= j <= i
    if window_left is not None:
        vis &= j >= i - window_left
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.softmax(s, -1).nan_to_num(0.0) @ v, lse


def err(a, b):
    return (a.float() - b.float()).abs().max().item()


results = {}


def section(name, fn):
    t0 = time.time()
    try:
        fn()
        results[name] = True
    except Exception as e:  # noqa: BLE001
        results[name] = False
        print(f"SMOKE {name} FAIL after {time.time() - t0:.1f} s: {type(e).__name__}: {str(e).splitlines()[0][:400] if str(e) else ''}")
        print("".join(traceback.format_exc().splitlines(True)[-12:]), flush=True)


def env():
    print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"GPU {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}, "
          f"sm{''.join(map(str, torch.cuda.get_device_capability())) if torch.cuda.is_available() else '-'}")
    for d in ("cuda-bindings", "cuda-pathfinder", "triton", "numpy", "flash-attn-4", "nvidia-cutlass-dsl-libs-cu13",
              "apache-tvm-ffi", "quack-kernels", "flashinfer-python", "packaging", "requests"):
        print(f"  {d} {version(d)}")
    try:
        print("  " + subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1])
    except Exception as e:  # noqa: BLE001
        print(f"  nvcc: {e}")
    print(flush=True)


def fa4():
    t0 = time.time()
    from flash_attn.cute import flash_attn_func
    print(f"SMOKE fa4 import ok ({time.time() - t0:.1f} s)", flush=True)
    torch.manual_seed(0)
    for dtype, hq, hkv, d, causal, softcap in ((torch.bfloat16, 4, 4, 64, True, 0.0), (torch.float16, 8, 2, 128, False, 0.0),
                                               (torch.bfloat16, 4, 4, 64, True, 30.0)):
        b, sq, skv = 2, 256, 320
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, requires_grad=True)
        k = torch.randn(b, skv, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
        v = torch.randn(b, skv, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
        scale = d ** -0.5
        for det in (False, True):
            t0 = time.time()
            out, lse = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, softcap=softcap, deterministic=det,
                                       return_lse=True)
            torch.cuda.synchronize()
            t1 = time.time()
            d_o, d_lse = torch.randn_like(out), torch.randn_like(lse)
            dq, dk, dv = torch.autograd.grad([out, lse], [q, k, v], [d_o, d_lse])
            torch.cuda.synchronize()
            t2 = time.time()
            qr, kr, vr = (t.detach().transpose(1, 2).float().requires_grad_() for t in (q, k, v))
            o_ref, lse_ref = ref(qr, kr, vr, scale, causal, softcap=softcap)
            g = torch.autograd.grad([o_ref, lse_ref], [qr, kr, vr], [d_o.transpose(1, 2).float(), d_lse])
            e = [err(out.transpose(1, 2), o_ref), err(lse, lse_ref)] + [err(x.transpose(1, 2), y) for x, y in zip((dq, dk, dv), g)]
            print(f"SMOKE fa4 {str(dtype)[6:]} H={hq}/{hkv} D={d} causal={causal} softcap={softcap} deterministic={det}: "
                  f"fwd {t1 - t0:.1f} s, bwd {t2 - t1:.1f} s (first call: compiles); max |err| vs float32: "
                  f"O {e[0]:.2e} LSE {e[1]:.2e} dQ {e[2]:.2e} dK {e[3]:.2e} dV {e[4]:.2e}", flush=True)


def flashinfer():
    t0 = time.time()
    import flashinfer as fi
    print(f"SMOKE flashinfer import ok ({time.time() - t0:.1f} s), version {fi.__version__}", flush=True)
    torch.manual_seed(0)
    # One JIT module each (minutes of nvcc the first time): the two that ci/gpu_run.sh thirdparty run needs first.
    for backend in ("fa2", "fa3"):
        for dtype, hq, hkv, d, causal, wl in ((torch.bfloat16, 4, 4, 64, True, -1),):
            sq, skv = 256, 320
            q = torch.randn(sq, hq, d, device="cuda", dtype=dtype)
            k = torch.randn(skv, hkv, d, device="cuda", dtype=dtype)
            v = torch.randn(skv, hkv, d, device="cuda", dtype=dtype)
            t0 = time.time()
            o, lse = fi.single_prefill_with_kv_cache(q, k, v, causal=causal, sm_scale=d ** -0.5, window_left=wl,
                                                     backend=backend, return_lse=True)
            torch.cuda.synchronize()
            t1 = time.time()
            o_ref, lse_ref = ref(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], d ** -0.5, causal,
                                 window_left=None if wl < 0 else wl)
            print(f"SMOKE flashinfer {backend} {str(dtype)[6:]} H={hq}/{hkv} D={d} causal={causal} window_left={wl}: "
                  f"{t1 - t0:.1f} s (first call: JIT); max |err| vs float32: O {err(o.transpose(0, 1), o_ref[0]):.2e}, "
                  f"LSE*ln2 {err(lse.transpose(0, 1) * math.log(2), lse_ref[0]):.2e} (LSE as given: "
                  f"{err(lse.transpose(0, 1), lse_ref[0]):.2e})", flush=True)


env()
section("fa4", fa4)
section("flashinfer", flashinfer)
print("SMOKE summary: " + ", ".join(f"{k} {'ok' if v else 'FAIL'}" for k, v in results.items()))
sys.exit(0 if all(results.values()) else 1)
