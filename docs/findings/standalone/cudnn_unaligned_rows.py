"""cuDNN SDPA on views whose rows are not 16-byte aligned: wrong O, dQ, dK, dV (F-1, docs/findings/README.md)

Standalone: plain PyTorch on a CUDA GPU, nothing from attnfuzz. It calls
torch.nn.functional.scaled_dot_product_attention under sdpa_kernel([SDPBackend.CUDNN_ATTENTION])
with Q, K, V (and dO) that are legal views of padded buffers: the last dimension contiguous, but
a row stride, head stride or storage offset that is not a multiple of 16 bytes. It compares O,
dQ, dK, dV with a float64 math reference (rms and max error, count of non-finite elements), and
gives the math path's own error for scale, plus the memory-efficient kernel on the same inputs.

Configurations:
  f1_O_nan, f1_exec_fails, f1_exec_fails_qpart2, f1_O_wrong   the three F-1 reproducers
      (docs/findings/repro/F-1-*.json: shape, dtype, order, row padding, mask; qpart2 is the second
      Q part of the q_split composition that made mha_graph.execute fail: Sq=1, Q at offset 14)
  campaign_bhsd, campaign_bshd   fp16, prefix-LM mask (prefix 12), B=1 Hq=6 Hkv=2 (GQA), Sq=37,
      Skv=32, D=128, Q's heads padded apart by 13 elements, V at a storage offset of 7 elements
  <name>_aligned   the same values, every tensor contiguous (controls)

The key experiment: every unaligned configuration is run with the same values and different
memory around the views:
  zeros   padding and the gap before the storage offset are 0
  nan     padding and gap are NaN
  big     padding and gap are 3e4
  guard   padding and gap 0, plus 4096 elements of NaN before and after the view's extent
          (reads beyond the view's own extent hit NaN)
A correct kernel gives bitwise the same O, dK, dV for every fill (dQ of cuDNN may differ by
rounding between runs, see the repeat check). Each (configuration, fill) runs in its own process,
since some configurations fault the CUDA context ("misaligned address").

    python3 cudnn_unaligned_rows.py                 # everything, ~30-60 s on an H200
    python3 cudnn_unaligned_rows.py --one CONFIG FILL   # one configuration in this process

Result lines (grep '^RESULT'):
  RESULT config=C fill=F backend=cudnn|math|efficient call=N status=ok|error ...
      O_rms O_max O_nonfinite ... dV_nonfinite: error against float64 (rms over all elements, so
      any NaN gives nan; max over finite elements; count of non-finite where the reference is
      finite); repeat=identical|differs (cudnn call 2: bitwise against call 1)
  RESULT kind=vs_zero config=C fill=F O=same|<max abs diff>[+<n>nf] ...   cudnn call 1 against
      the zero fill of the same configuration (nf: elements finite in one, not the other)
  INPUT config=C fill=F tensor=q|k|v|dO size stride storage_offset buffer_numel stride_bytes
      (of B, H, S where their size > 1) offset_bytes ptr_mod16 aligned16 (every stride and the
      offset a multiple of 16 bytes)
  CHECK config=C fill=F can_use_cudnn=True|False   torch.backends.cuda.can_use_cudnn_attention
"""
import concurrent.futures
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

GUARD = 4096
FILLS = ("zeros", "nan", "big", "guard")
NAMES = ("O", "dQ", "dK", "dV")


def lay(order="bhsd", rp=0, hp=0, off=0):
    return {"order": order, "rp": rp, "hp": hp, "off": off}


def cfg(dtype, b, hq, hkv, sq, skv, dqk, dv, mask, q, k=None, v=None, d_out=None, seed=0):
    k = k or q
    v = v or q
    d_out = d_out or q
    return {"dtype": dtype, "shape": (b, hq, hkv, sq, skv, dqk, dv), "mask": mask,
            "layouts": {"q": q, "k": k, "v": v, "dO": d_out}, "seed": seed}


UNALIGNED = {
    # The 2026-11-29 reproducer F-1-torch-cudnn-unaligned-rows-O-nan.json (in git history): causal top-left, BSHD, row padding 3 (22-byte rows)
    "f1_O_nan": cfg("fp16", 1, 1, 1, 2, 4, 8, 16, "causal_tl", lay("bshd", rp=3), seed=1),
    # repro/F-1-torch-cudnn-unaligned-rows-execute-fails.json: no mask, BSHD, row padding 6 (28-byte rows)
    "f1_exec_fails": cfg("fp16", 1, 1, 1, 2, 2, 8, 8, "none", lay("bshd", rp=6), seed=2),
    # its q_split composition's second part: Q rows [1, 2) of that buffer, i.e. Sq=1 at offset 14
    "f1_exec_fails_qpart2": cfg("fp16", 1, 1, 1, 1, 2, 8, 8, "none", lay("bshd", rp=6, off=14),
                                k=lay("bshd", rp=6), v=lay("bshd", rp=6), seed=3),
    # The 2026-11-29 reproducer F-1-torch-cudnn-unaligned-rows-O-wrong.json (in git history): block-sparse mask with every block
    # visible (a boolean mask of all True), BHSD, row padding 2 (20-byte rows)
    "f1_O_wrong": cfg("fp16", 1, 1, 1, 2, 2, 8, 8, "all", lay("bhsd", rp=2), seed=4),
    # the campaign case: GQA, prefix-LM, Q heads padded apart by 13, V at offset 7, K and dO plain
    "campaign_bhsd": cfg("fp16", 1, 6, 2, 37, 32, 128, 128, "prefix12", lay("bhsd", hp=13),
                         k=lay("bhsd"), v=lay("bhsd", off=7), d_out=lay("bhsd"), seed=5),
    "campaign_bshd": cfg("fp16", 1, 6, 2, 37, 32, 128, 128, "prefix12", lay("bshd", hp=13),
                         k=lay("bshd"), v=lay("bshd", off=7), d_out=lay("bshd"), seed=5),
}
CONFIGS = dict(UNALIGNED)
for _name, _c in UNALIGNED.items():
    CONFIGS[_name + "_aligned"] = dict(_c, layouts={r: lay() for r in ("q", "k", "v", "dO")})

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def place(sizes, layout):
    """Strides, storage offset and extent (elements) of a [B, H, S, D] view, as attnfuzz's layouts:
    stride(D) = 1; the innermost of the order's B/H/S gets w + row_padding (+ head_padding if H);
    each outer one size*stride of the next (+ head_padding if H); extent = offset + size*stride of
    the outermost."""
    dims = ["bhs".index(c) for c in layout["order"][:3]]
    hp = layout["hp"]
    strides = [0, 0, 0, 1]
    x1, x2, x3 = dims
    strides[x3] = sizes[3] + layout["rp"] + (hp if x3 == 1 else 0)
    strides[x2] = sizes[x3] * strides[x3] + (hp if x2 == 1 else 0)
    strides[x1] = sizes[x2] * strides[x2] + (hp if x1 == 1 else 0)
    return strides, layout["off"], layout["off"] + sizes[x1] * strides[x1]


def tensor_sizes(c):
    b, hq, hkv, sq, skv, dqk, dv = c["shape"]
    return {"q": (b, hq, sq, dqk), "k": (b, hkv, skv, dqk), "v": (b, hkv, skv, dv), "dO": (b, hq, sq, dv)}


def values(c, device):
    g = torch.Generator().manual_seed(1000 + c["seed"])
    dtype = DTYPES[c["dtype"]]
    return {r: torch.randn(s, generator=g).to(dtype).to(device) for r, s in tensor_sizes(c).items()}


def mask_of(c, device):
    """(attn_mask or None, is_causal, boolean visibility for the reference)."""
    _, _, _, sq, skv, _, _ = c["shape"]
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(skv, device=device)[None, :]
    kind = c["mask"]
    if kind == "none":
        return None, False, None
    if kind == "causal_tl":
        return None, True, j <= i
    if kind == "all":
        m = torch.ones(sq, skv, dtype=torch.bool, device=device)
        return m[None, None], False, m
    if kind.startswith("prefix"):
        m = (j < int(kind[6:])) | (j <= i)
        return m[None, None], False, m
    raise ValueError(kind)


def fill_value(fill):
    return {"zeros": 0.0, "nan": float("nan"), "big": 3e4, "guard": 0.0}[fill]


def make_view(val, layout, fill):
    strides, off, extent = place(val.shape, layout)
    slack = GUARD if fill == "guard" else 0
    buf = torch.full((slack + extent + slack,), fill_value(fill), dtype=val.dtype, device=val.device)
    if slack:
        buf[:slack] = float("nan")
        buf[slack + extent:] = float("nan")
    view = buf.as_strided(val.shape, strides, slack + off)
    view.copy_(val)
    return view


def describe(config, fill, role, t):
    es = t.element_size()
    strided = [(n, st) for n, sz, st in zip("BHS", t.shape[:3], t.stride()[:3]) if sz > 1]
    aligned = all(st * es % 16 == 0 for _, st in strided) and t.storage_offset() * es % 16 == 0
    return (f"INPUT config={config} fill={fill} tensor={role} dtype={str(t.dtype)[6:]} "
            f"size={tuple(t.shape)} stride={tuple(t.stride())} storage_offset={t.storage_offset()} "
            f"buffer_numel={t.untyped_storage().nbytes() // es} "
            f"stride_bytes={','.join(f'{n}:{st * es}' for n, st in strided) or '-'} "
            f"offset_bytes={t.storage_offset() * es} ptr_mod16={t.data_ptr() % 16} aligned16={aligned}")


def reference(vals, vis, scale, groups):
    q, k, v = (vals[r].double().requires_grad_(True) for r in ("q", "k", "v"))
    kk, vv = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    s = scale * q @ kk.transpose(-1, -2)
    if vis is not None:
        s = s.masked_fill(~vis, float("-inf"))
    o = torch.softmax(s, -1) @ vv
    return [o.detach()] + list(torch.autograd.grad(o, (q, k, v), vals["dO"].double()))


def errors(out, ref):
    parts = []
    for n, x, r in zip(NAMES, out, ref):
        e = x.double() - r
        fin = torch.isfinite(e)
        rms = float(e.pow(2).mean().sqrt())
        mx = float(e[fin].abs().max()) if fin.any() else float("nan")
        parts.append(f"{n}_rms={rms:.3e} {n}_max={mx:.3e} {n}_nonfinite={int((~fin).sum())}")
    return " ".join(parts)


def bits(t):
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def diff(a, b):
    if a.shape == b.shape and torch.equal(bits(a), bits(b)):
        return "same"
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    both = fa & fb
    md = float((a[both].double() - b[both].double()).abs().max()) if both.any() else 0.0
    nf = int((fa != fb).sum())
    return f"{md:.3g}" + (f"+{nf}nf" if nf else "")


def short(e):
    msg = " ".join(str(e).split())
    return json.dumps(msg[:200])


def one(config, fill, device="cuda", save=None, show_inputs=True):
    c = CONFIGS[config]
    _, hq, hkv, _, _, dqk, _ = c["shape"]
    head = f"config={config} fill={fill}"
    vals = values(c, device)
    attn_mask, causal, vis = mask_of(c, device)
    scale = dqk ** -0.5
    ref = reference(vals, vis, scale, hq // hkv)
    print(f"REF {head} " + " ".join(f"{n}_ref_rms={float(r.pow(2).mean().sqrt()):.3e}" for n, r in zip(NAMES, ref)))
    views = {r: make_view(vals[r], c["layouts"][r], fill) for r in ("q", "k", "v", "dO")}
    if show_inputs:
        for r, t in views.items():
            print(describe(config, fill, r, t))
    gqa = {"enable_gqa": True} if hq != hkv else {}
    q, k, v = (views[r].requires_grad_(True) for r in ("q", "k", "v"))
    check = getattr(torch.backends.cuda, "can_use_cudnn_attention", None)
    if check is not None and device == "cuda":
        try:
            try:
                params = torch.backends.cuda.SDPAParams(q, k, v, attn_mask, 0.0, causal, hq != hkv)
            except TypeError:
                params = torch.backends.cuda.SDPAParams(q, k, v, attn_mask, 0.0, causal)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                ok = check(params, True)
            why = " | ".join(" ".join(str(x.message).split())[:150] for x in w)
            print(f"CHECK {head} can_use_cudnn={ok} debug={json.dumps(why)}")
        except Exception as e:  # noqa: BLE001
            print(f"CHECK {head} can_use_cudnn=unknown error={short(e)}")
    sys.stdout.flush()

    dead = [None]

    def call(backend):
        if dead[0]:
            return f"skipped: CUDA context unusable after {dead[0]}"
        try:
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal, scale=scale, **gqa)
            grads = torch.autograd.grad(o, (q, k, v), views["dO"])
            if device == "cuda":
                torch.cuda.synchronize()
            return [o.detach().clone()] + [g.clone() for g in grads]
        except Exception as e:  # noqa: BLE001
            try:
                if device == "cuda":
                    torch.cuda.synchronize()
                    torch.zeros(1, device=device).add_(1).item()
            except Exception:  # noqa: BLE001
                dead[0] = " ".join(str(e).split())[:60]
            return e

    results = {}
    for label, backend, n in (("cudnn", SDPBackend.CUDNN_ATTENTION, 1), ("cudnn", SDPBackend.CUDNN_ATTENTION, 2),
                              ("math", SDPBackend.MATH, 1), ("efficient", SDPBackend.EFFICIENT_ATTENTION, 1)):
        out = call(backend)
        line = f"RESULT {head} backend={label} call={n}"
        if isinstance(out, (str, Exception)):
            print(f"{line} status=error error={short(out)}")
        else:
            results[(label, n)] = out
            extra = ""
            if label == "cudnn" and n == 2 and ("cudnn", 1) in results:
                first = results[("cudnn", 1)]
                d = [diff(a, b) for a, b in zip(out, first)]
                extra = " repeat=" + ("identical" if all(x == "same" for x in d) else "differs") + " " + \
                        " ".join(f"{nm}_repeat={x}" for nm, x in zip(NAMES, d))
            print(f"{line} status=ok {errors(out, ref)}{extra}")
        sys.stdout.flush()
    if save and ("cudnn", 1) in results:
        torch.save({nm: t.cpu() for nm, t in zip(NAMES, results[("cudnn", 1)])}, save)


def jobs():
    for name in CONFIGS:
        for fill in (FILLS if not name.endswith("_aligned") else ("zeros", "guard")):
            yield name, fill


def run_child(name, fill, tmp, device):
    path = os.path.join(tmp, f"{name}.{fill}.pt")
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, fill, "--save", path, "--device", device]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        out, rc, err = p.stdout, p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        out, rc, err = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout", ""
    if rc != 0:
        tail = " ".join(" ".join(l.split()) for l in err.strip().splitlines()[-3:])
        out += f"RESULT config={name} fill={fill} backend=process status=child_failed rc={rc} error={json.dumps(tail[-300:])}\n"
    return out, path


def parse(line):
    kv = {}
    for a, b in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', line):
        kv[a] = json.loads(b) if b.startswith('"') else b
    return kv


def main(device="cuda"):
    print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(),
          "GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
    print(f"VERSIONS torch={torch.__version__} cuda={torch.version.cuda} cudnn={torch.backends.cudnn.version()} "
          f"gpu={json.dumps(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')}")
    print("each (configuration, fill) below ran in its own process; error = kernel - float64 reference\n")
    with tempfile.TemporaryDirectory() as tmp:
        todo = list(jobs())
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
            futs = [ex.submit(run_child, n, f, tmp, device) for n, f in todo]
            outs = [f.result() for f in futs]
        rows = {}
        for (name, fill), (out, _) in zip(todo, outs):
            print(f"--- {name} fill={fill}")
            print(out.rstrip())
            for line in out.splitlines():
                if line.startswith("RESULT"):
                    kv = parse(line)
                    rows.setdefault((name, fill), {})[(kv.get("backend"), kv.get("call"))] = kv
        print("\n--- cudnn call 1 against the zero fill of the same configuration (bitwise; else max abs diff)")
        vs = {}
        for name, fill in todo:
            if fill == "zeros":
                continue
            a, z = os.path.join(tmp, f"{name}.{fill}.pt"), os.path.join(tmp, f"{name}.zeros.pt")
            if not (os.path.exists(a) and os.path.exists(z)):
                vs[(name, fill)] = "n/a"
                print(f"RESULT kind=vs_zero config={name} fill={fill} status=missing")
                continue
            ta, tz = torch.load(a, weights_only=True), torch.load(z, weights_only=True)
            d = {nm: diff(ta[nm], tz[nm]) for nm in NAMES}
            vs[(name, fill)] = "same" if all(x == "same" for x in d.values()) else \
                ",".join(f"{nm}:{x}" for nm, x in d.items() if x != "same")
            print(f"RESULT kind=vs_zero config={name} fill={fill} " + " ".join(f"{nm}={x}" for nm, x in d.items()))

    def cell(kv, nm):
        if not kv or kv.get("status") != "ok":
            return "-"
        return f"{float(kv[nm + '_rms']):.2e}/{kv[nm + '_nonfinite']}"

    print("\nSummary: cudnn call 1, rms error / non-finite count per tensor; math = the math path's rms error")
    hdr = f"{'config':28s} {'fill':6s} {'O':>14s} {'dQ':>14s} {'dK':>14s} {'dV':>14s} {'math O':>9s} {'math dQ':>9s} {'repeat':9s} vs zero / status"
    print(hdr)
    print("-" * len(hdr))
    for name, fill in todo:
        r = rows.get((name, fill), {})
        c1, c2, m = r.get(("cudnn", "1")), r.get(("cudnn", "2")), r.get(("math", "1"))
        status = ""
        if not c1 or c1.get("status") != "ok":
            status = (c1 or r.get(("process", None)) or {}).get("error", "no result")[:70]
        mo = f"{float(m['O_rms']):.1e}" if m and m.get("status") == "ok" else "-"
        md = f"{float(m['dQ_rms']):.1e}" if m and m.get("status") == "ok" else "-"
        rep = c2.get("repeat", "-") if c2 else "-"
        print(f"{name:28s} {fill:6s} {cell(c1, 'O'):>14s} {cell(c1, 'dQ'):>14s} {cell(c1, 'dK'):>14s} {cell(c1, 'dV'):>14s} "
              f"{mo:>9s} {md:>9s} {rep:9s} {vs.get((name, fill), '') if fill != 'zeros' else ''} {status}")
    print("\nSummary: efficient kernel (control) on the same inputs, O/dQ rms error")
    for name, fill in todo:
        e = rows.get((name, fill), {}).get(("efficient", "1"))
        if e is None:
            txt = "no result"
        elif e.get("status") == "ok":
            txt = f"O {float(e['O_rms']):.2e}  dQ {float(e['dQ_rms']):.2e}  dK {float(e['dK_rms']):.2e}  dV {float(e['dV_rms']):.2e}"
        else:
            txt = "error " + e.get("error", "")[:90]
        print(f"{name:28s} {fill:6s} {txt}")


if __name__ == "__main__":
    if "--one" in sys.argv:
        i = sys.argv.index("--one")
        name, fill = sys.argv[i + 1], sys.argv[i + 2]
        save = sys.argv[sys.argv.index("--save") + 1] if "--save" in sys.argv else None
        dev = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
        one(name, fill, device=dev, save=save)
    else:
        main(sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda")
    sys.exit(0)
