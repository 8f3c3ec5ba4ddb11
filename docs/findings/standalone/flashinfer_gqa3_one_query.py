"""FlashInfer single_prefill_with_kv_cache at fp16, GQA 3 query heads over 1 KV head, one query
and one key, D = 64, causal: is the CUDA "illegal instruction" of LEDGER row
`open-flashinfer-illegal-instruction-gqa-s1` real in a fresh process? Plain PyTorch and
FlashInfer only (no attnfuzz code).

    python3 flashinfer_gqa3_one_query.py --prebuild        # JIT-build the modules used below (nvcc), no kernel run
    python3 flashinfer_gqa3_one_query.py [--jobs N] [--repeat R]
    python3 flashinfer_gqa3_one_query.py --one NAME        # one configuration in this process

The finding: FlashInfer 0.7.4, fp16, q [1][3][64], k = v [1][1][64] (NHD: [S][H][D]), causal,
backend "auto" (which picks fa3 on sm90 for these head dims and no custom mask), return_lse.
The primary configuration runs first, alone, R times (default 1), each in a fresh Python
process; then twice more among the neighbours (backend fa3 or fa2 forced, GQA 2/1, 4/1, 5/1,
6/2, 1/1, Sq = Skv = 2 and 16, one query over 16 keys, non-causal, bf16), each in a fresh
process, N at a time (a fault is sticky: no process
runs a second configuration). Each child prints the backend "auto" resolved to, then compares O
and LSE (FlashInfer's LSE is base 2: times ln 2) with a float64 reference.

Result lines (grep '^RESULT'), and a closing VERDICT line.
"""
import argparse
import concurrent.futures as cf
import json
import math
import os
import subprocess
import sys
import time

PRIMARY = dict(name="primary_fp16_gqa3_s1_d64_causal_auto", dtype="fp16", hq=3, hkv=1, sq=1, skv=1, d=64,
               causal=True, backend="auto")


def configs():
    out = []
    def add(name, **kw):
        c = dict(PRIMARY); c.update(kw); c["name"] = name; out.append(c)
    for i in (2, 3):  # the primary again, each in a fresh process (after the first, which runs alone)
        add(f"{PRIMARY['name']}_run{i}")
    add("fp16_gqa3_s1_causal_fa3", backend="fa3")
    add("fp16_gqa3_s1_causal_fa2", backend="fa2")
    add("fp16_gqa3_s1_noncausal_auto", causal=False)
    add("fp16_gqa2_s1_causal_auto", hq=2)
    add("fp16_gqa4_s1_causal_auto", hq=4)
    add("fp16_gqa6over2_s1_causal_auto", hq=6, hkv=2)
    add("fp16_mha1_s1_causal_auto", hq=1)
    add("fp16_gqa3_s2_causal_auto", sq=2, skv=2)
    add("fp16_gqa3_s16_causal_auto", sq=16, skv=16)
    add("fp16_gqa3_sq1_skv16_causal_auto", sq=1, skv=16)
    add("fp16_gqa5_s1_causal_auto", hq=5)
    add("bf16_gqa3_s1_causal_auto", dtype="bf16")
    add("bf16_gqa2_s1_causal_auto", dtype="bf16", hq=2)
    add("bf16_gqa3_s2_causal_auto", dtype="bf16", sq=2, skv=2)
    return out


def resolved_backend(flashinfer, torch, q, k):
    from flashinfer.utils import determine_attention_backend
    return determine_attention_backend(q.device, 0, False, False, q.dtype, k.dtype,
                                       head_dim_qk=q.shape[-1], head_dim_vo=q.shape[-1])


def run_one(c):
    import torch
    import flashinfer
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[c["dtype"]]
    torch.manual_seed(0)
    hq, hkv, sq, skv, d = c["hq"], c["hkv"], c["sq"], c["skv"], c["d"]
    q = torch.randn(sq, hq, d, device="cuda", dtype=dt)
    k = torch.randn(skv, hkv, d, device="cuda", dtype=dt)
    v = torch.randn(skv, hkv, d, device="cuda", dtype=dt)
    torch.cuda.synchronize()
    scale = d ** -0.5
    fields = dict(name=c["name"], flashinfer=flashinfer.__version__, gpu=torch.cuda.get_device_name())
    fields["backend"] = c["backend"] if c["backend"] != "auto" else "auto->" + resolved_backend(flashinfer, torch, q, k)
    try:
        t0 = time.time()
        o, lse = flashinfer.single_prefill_with_kv_cache(q, k, v, causal=c["causal"], sm_scale=scale, kv_layout="NHD",
                                                         backend=c["backend"], return_lse=True)
        torch.cuda.synchronize()
        fields["seconds"] = round(time.time() - t0, 2)
    except Exception as e:  # noqa: BLE001 - a fault is the result here
        fields.update(status="error", error=f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
        try:
            torch.ones(4, device="cuda").sum().item(); fields["context_after"] = "ok"
        except Exception as e2:  # noqa: BLE001
            fields["context_after"] = f"dead ({type(e2).__name__})"
        print("RESULT " + json.dumps(fields), flush=True)
        return 3
    # float64 reference, [H][S][D]
    qd, kd, vd = (t.double().transpose(0, 1) for t in (q, k, v))
    g = hq // hkv
    kd, vd = kd.repeat_interleave(g, 0), vd.repeat_interleave(g, 0)
    s = (qd @ kd.transpose(-1, -2)) * scale
    if c["causal"]:  # bottom-right aligned
        m = torch.ones(sq, skv, dtype=torch.bool, device="cuda").tril(skv - sq)
        s = s.masked_fill(~m, float("-inf"))
    ref_lse = torch.logsumexp(s, -1).transpose(0, 1)  # [S][H]
    ref_o = (torch.softmax(s, -1) @ vd).transpose(0, 1)
    fields["O_rel"] = float((o.double() - ref_o).abs().max() / ref_o.abs().max())
    fields["LSE_abs"] = float((lse.double() * math.log(2) - ref_lse).abs().max())
    fields["finite"] = bool(torch.isfinite(o).all() and torch.isfinite(lse).all())
    fields["status"] = "ok"
    try:
        torch.ones(4, device="cuda").sum().item(); fields["context_after"] = "ok"
    except Exception as e2:  # noqa: BLE001
        fields["context_after"] = f"dead ({type(e2).__name__})"
    print("RESULT " + json.dumps(fields), flush=True)
    return 0


def prebuild_one(spec):
    """Builds (nvcc through ninja) and loads one single-prefill module, running no kernel."""
    import torch
    from flashinfer.prefill import get_single_prefill_module
    backend, dname = spec.split(":")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dname]
    t0 = time.time()
    # backend, dtype_q, dtype_kv, dtype_o, head_dim_qk, head_dim_vo, pos_encoding_mode,
    # use_sliding_window, use_logits_soft_cap, use_fp16_qk_reduction, fp8 token-head scale
    get_single_prefill_module(backend, dt, dt, dt, 64, 64, 0, False, False, False, False)
    print(f"PREBUILT {spec} in {time.time() - t0:.1f} s", flush=True)
    return 0


def child(c, timeout):
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one-json", json.dumps(c)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(name=c["name"], status="timeout", process_s=round(time.time() - t0, 1)), ""
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if res is None:
        tail = " | ".join((p.stderr or "").strip().splitlines()[-3:])[:300]
        res = dict(name=c["name"], status="child_died", rc=p.returncode, stderr_tail=tail)
    res["process_s"] = round(time.time() - t0, 1)
    return res, p.stderr


def show(c, r):
    shape = f"{c['dtype']} H={c['hq']}/{c['hkv']} Sq={c['sq']} Skv={c['skv']} D={c['d']} {'causal' if c['causal'] else 'full'} backend={r.get('backend', c['backend'])}"
    if r.get("status") == "ok":
        tail = f"ok O_rel={r['O_rel']:.2e} LSE_abs={r['LSE_abs']:.2e} finite={r['finite']}"
    else:
        tail = f"{r.get('status')} {r.get('error', '')}{r.get('stderr_tail', '')} context_after={r.get('context_after', '-')}"
    print(f"RESULT name={c['name']} [{shape}] {tail} ({r.get('process_s', '?')} s)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one")
    ap.add_argument("--one-json", help=argparse.SUPPRESS)
    ap.add_argument("--prebuild", action="store_true", help="build the modules (--modules) in parallel")
    ap.add_argument("--modules", default="fa3:fp16,fa2:fp16,fa3:bf16", help="backend:dtype list for --prebuild")
    ap.add_argument("--only", help="comma-separated neighbour names (default: all)")
    ap.add_argument("--prebuild-one", help=argparse.SUPPRESS)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1, help="runs of the primary alone, before the neighbours")
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    if a.one_json:
        return run_one(json.loads(a.one_json))
    if a.prebuild_one:
        return prebuild_one(a.prebuild_one)
    if a.prebuild:
        specs = a.modules.split(",")
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--prebuild-one", s]) for s in specs]
        return max(p.wait() for p in procs)
    allc = {c["name"]: c for c in [PRIMARY] + configs()}
    if a.one:
        return run_one(allc[a.one])
    import torch
    print(f"python {sys.version.split()[0]} torch {torch.__version__} cuda {torch.version.cuda}", flush=True)
    print("# the primary configuration, alone, each time in a fresh process", flush=True)
    prim = []
    for i in range(a.repeat):
        r, err = child(PRIMARY, a.timeout)
        prim.append(r)
        show(PRIMARY, r)
        if i == 0 and r.get("status") != "ok":
            print("# stderr of the first primary run (last 25 lines):")
            for line in (err or "").strip().splitlines()[-25:]:
                print("#   " + line)
    print(f"# neighbours, each in a fresh process, {a.jobs} at a time", flush=True)
    neigh = configs()
    if a.only:
        neigh = [c for c in neigh if c["name"] in a.only.split(",")]
    results = [None] * len(neigh)
    with cf.ThreadPoolExecutor(a.jobs) as ex:  # each result printed as it comes
        futs = {ex.submit(child, c, a.timeout): i for i, c in enumerate(neigh)}
        for f in cf.as_completed(futs):
            i = futs[f]
            results[i] = f.result()[0]
            show(neigh[i], results[i])
    prim += [r for c, r in zip(neigh, results) if c["name"].startswith(PRIMARY["name"])]
    faults = [c["name"] for c, r in zip(neigh, results) if r.get("status") != "ok" and not c["name"].startswith(PRIMARY["name"])]
    bad = [c["name"] for c, r in zip(neigh, results) if r.get("status") == "ok" and not c["name"].startswith(PRIMARY["name"]) and (r["O_rel"] > 2e-2 or not r["finite"])]
    nprim = sum(r.get("status") != "ok" for r in prim)
    if nprim == len(prim):
        v = f"REAL: the primary configuration faults in {nprim} of {len(prim)} fresh processes (first error: {prim[0].get('error', prim[0].get('status'))})"
    elif nprim == 0:
        v = f"NOT REPRODUCED: the primary configuration runs clean in {len(prim)} of {len(prim)} fresh processes"
    else:
        v = f"INTERMITTENT: the primary configuration faults in {nprim} of {len(prim)} fresh processes"
    print(f"VERDICT {v}; neighbours failing: {faults or 'none'}; neighbours with O error > 2e-2: {bad or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
