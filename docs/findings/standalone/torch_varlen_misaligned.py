"""LibTorch 2.11's varlen attention ops on packed buffers that start past their alignment, without attnfuzz.

The ledger rows s57-torch-varlen-misaligned-sticky-fault (docs/findings/LEDGER.md) say that
`_flash_attention_forward` with cumulative offsets ends the CUDA context with `misaligned address`
when Q, K and V are views one element into their allocations (a base pointer 2 bytes past
alignment in fp16/bf16), and that `_efficient_attention_forward` was not seen alone. A view one
element in is a legal strided tensor: the op must compute on it, copy it, or refuse it with an
error that leaves the context usable. Dense SDPA on the same kind of view is the control.

Each variant runs in its own process (a sticky fault ends the context), prints one line:
  ok      max |O err| against float64 over every row (the sequences see every key)
  raised  the exception's first line, and whether the context still works afterwards
  died    the child's exit status (the fault killed it)
Usage: python3 torch_varlen_misaligned.py            (one CUDA GPU; runs every variant)
       python3 torch_varlen_misaligned.py VARIANT    (one variant, in this process)
"""
import math
import subprocess
import sys

import torch

dev = "cuda"
aten = torch.ops.aten
LENS_Q, LENS_KV, H, D = [5, 11], [9, 6], 2, 64


def packed(lens, lead, dtype, which, name):
    """[sum(lens), H, D] random, a view `lead` elements into a larger allocation when `which` names it."""
    total = sum(lens)
    n = total * H * D
    shift = lead if name in which else 0
    base = torch.randn(n + shift, device=dev, dtype=dtype)
    return base[shift:shift + n].view(total, H, D)


def reference_o(q, k, v, cu_q, cu_k, scale):
    out = torch.empty(q.shape, dtype=torch.float64, device=dev)
    for b in range(len(cu_q) - 1):
        qs, ks, vs = (t.double() for t in (q[cu_q[b]:cu_q[b + 1]], k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]]))
        s = torch.einsum("ihd,jhd->hij", qs, ks) * scale
        out[cu_q[b]:cu_q[b + 1]] = torch.einsum("hij,jhd->ihd", torch.softmax(s, -1), vs)
    return out


def cumulative(lens):
    cu = [0]
    for length in lens:
        cu.append(cu[-1] + length)
    return cu


def run(variant):
    op, lead, which, dtype = variant.split(":")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    lead = int(lead)
    torch.manual_seed(0)
    q = packed(LENS_Q, lead, dtype, which, "q")
    k = packed(LENS_KV, lead, dtype, which, "k")
    v = packed(LENS_KV, lead, dtype, which, "v")
    cu_q, cu_k = cumulative(LENS_Q), cumulative(LENS_KV)
    cq = torch.tensor(cu_q, dtype=torch.int32, device=dev)
    ck = torch.tensor(cu_k, dtype=torch.int32, device=dev)
    scale = 1 / math.sqrt(D)
    ptrs = " ".join(f"{n}%16={t.data_ptr() % 16}" for n, t in (("q", q), ("k", k), ("v", v)))
    try:
        if op == "flash":
            out = aten._flash_attention_forward(q, k, v, cq, ck, max(LENS_Q), max(LENS_KV), 0.0, False, False, scale=scale)[0]
        elif op == "efficient":
            out = aten._efficient_attention_forward(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), None, cq, ck,
                                                    max(LENS_Q), max(LENS_KV), 0.0, 0, False, scale=scale)[0][0]
        elif op.startswith("sdpa-"):  # the control: dense SDPA, one sequence, [1, H, S, D] views of the packed buffers
            from torch.nn.attention import SDPBackend, sdpa_kernel
            backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}[op]
            qd = q[:LENS_Q[0]].transpose(0, 1).unsqueeze(0)
            kd = k[:LENS_KV[0]].transpose(0, 1).unsqueeze(0)
            vd = v[:LENS_KV[0]].transpose(0, 1).unsqueeze(0)
            with sdpa_kernel([backend]):
                od = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, scale=scale)
            torch.cuda.synchronize()
            ref = reference_o(q[:LENS_Q[0]], k[:LENS_KV[0]], v[:LENS_KV[0]], [0, LENS_Q[0]], [0, LENS_KV[0]], scale)
            err = float((od[0].transpose(0, 1).double() - ref).abs().max())
            print(f"{variant}: ok ({ptrs}) max|O err| {err:.3g}")
            return
        else:
            raise SystemExit(f"unknown op {op}")
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the point is to see what the op raises
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        try:
            torch.ones(4, device=dev).sum().item()
            torch.cuda.synchronize()
            after = "context still usable"
        except Exception as e2:  # noqa: BLE001
            after = f"context lost ({str(e2).strip().splitlines()[0][:80]})"
        print(f"{variant}: raised ({ptrs}) {type(e).__name__}: {first}; {after}")
        return
    err = float((out.double() - reference_o(q, k, v, cu_q, cu_k, scale)).abs().max())
    print(f"{variant}: ok ({ptrs}) max|O err| {err:.3g}")


VARIANTS = ([f"{op}:{lead}:{which}:bf16" for op in ("flash", "efficient")
             for lead, which in ((0, "-"), (1, "qkv"), (1, "q"), (1, "k"), (1, "v"), (8, "qkv"))] +
            [f"{op}:{lead}:{which}:bf16" for op in ("sdpa-flash", "sdpa-efficient") for lead, which in ((0, "-"), (1, "qkv"))] +
            ["flash:1:qkv:fp16", "efficient:1:qkv:fp16"])

if __name__ == "__main__":
    if len(sys.argv) > 1:
        run(sys.argv[1])
        sys.exit(0)
    print(torch.__version__, torch.cuda.get_device_name(), f"lens_q {LENS_Q} lens_kv {LENS_KV} H {H} D {D}, no mask")
    for variant in VARIANTS:
        r = subprocess.run([sys.executable, __file__, variant], capture_output=True, text=True, timeout=300)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith(variant)]
        if lines:
            print(lines[-1])
        else:
            tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1][:200]
            print(f"{variant}: died (exit {r.returncode}): {tail}")
        sys.stdout.flush()
