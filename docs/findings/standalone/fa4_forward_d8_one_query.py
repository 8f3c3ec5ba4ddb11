"""FlashAttention-4 (flash_attn.cute) forward at head dim 8 with one query and one key: is the
CUDA illegal memory access of LEDGER row `open-fa4-forward-illegal-address-d8` real in a fresh
process, or the consequence of an earlier fault? Plain PyTorch and FA4 only (no attnfuzz code).

    python3 fa4_forward_d8_one_query.py [--jobs N] [--repeat R]   # every configuration, each in its own process
    python3 fa4_forward_d8_one_query.py --one NAME                 # one configuration in this process

The finding: bf16, B = Hq = Hkv = Sq = Skv = 1, Dqk = Dv = 8, causal, forward, minimized by the
harness from a larger case in a campaign worker that had run other FA4 calls before. Here the
primary configuration runs first, alone (nothing else on the GPU from this script), R times
(default 1), each time in a fresh Python process whose first CUDA work is this one call; then
twice more among the neighbours (S = 2..16 and 128, D = 16, 24, 32, 64, non-causal, fp16,
B = H = 2, one query over several keys), each in a fresh process too, N at a time. A fault is sticky (it kills the CUDA context), so no process
ever runs a second configuration.

Each child: builds Q, K, V ([B][S][H][D], randn, seed 0), calls
flash_attn.cute.flash_attn_func(q, k, v, softmax_scale=D**-0.5, causal=..., return_lse=True),
synchronizes, and compares O and LSE with a float64 reference (largest error relative to the
reference's largest element; bf16 rounding is 2^-9 = 2.0e-3). Then a trivial CUDA op tells
whether the context survived.

Result lines (grep '^RESULT'):
  RESULT name=... status=ok O_rel=... LSE_abs=... context_after=ok
  RESULT name=... status=error error="..." context_after=ok|dead
  RESULT name=... status=child_died rc=N          (the process itself died, e.g. a signal)
and a closing VERDICT line.
"""
import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time

PRIMARY = dict(name="primary_bf16_d8_s1_causal", dtype="bf16", b=1, hq=1, hkv=1, sq=1, skv=1, d=8, causal=True)


def configs():
    out = []
    base = dict(PRIMARY)
    def add(name, **kw):
        c = dict(base); c.update(kw); c["name"] = name; out.append(c)
    for i in (2, 3):  # the primary again, each in a fresh process (after the first, which runs alone)
        add(f"{PRIMARY['name']}_run{i}")
    add("bf16_d8_s1_noncausal", causal=False)
    add("fp16_d8_s1_causal", dtype="fp16")
    for s in (2, 3, 4, 8, 16):
        add(f"bf16_d8_s{s}_causal", sq=s, skv=s)
    add("bf16_d8_s16_noncausal", sq=16, skv=16, causal=False)
    add("bf16_d8_sq1_skv8_causal", sq=1, skv=8)
    add("bf16_d8_s1_b2h2_causal", b=2, hq=2, hkv=2)
    add("bf16_d8_s128_causal", sq=128, skv=128)
    add("bf16_d16_s1_causal", d=16)
    add("bf16_d16_s4_causal", d=16, sq=4, skv=4)
    add("bf16_d24_s1_causal", d=24)
    add("bf16_d32_s1_causal", d=32)
    add("bf16_d64_s1_causal", d=64)
    return out


def run_one(c):
    """Runs one configuration in this process and prints its RESULT line."""
    import torch
    import flash_attn
    from flash_attn.cute import flash_attn_func
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[c["dtype"]]
    torch.manual_seed(0)
    b, hq, hkv, sq, skv, d = c["b"], c["hq"], c["hkv"], c["sq"], c["skv"], c["d"]
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
    k = torch.randn(b, skv, hkv, d, device="cuda", dtype=dt)
    v = torch.randn(b, skv, hkv, d, device="cuda", dtype=dt)
    torch.cuda.synchronize()
    scale = d ** -0.5
    fields = dict(name=c["name"], torch=torch.__version__, flash_attn=getattr(flash_attn, "__version__", "?"),
                  gpu=torch.cuda.get_device_name())
    try:
        t0 = time.time()
        o, lse = flash_attn_func(q, k, v, softmax_scale=scale, causal=c["causal"], return_lse=True)
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
    # float64 reference, [B][H][S][D]
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    g = hq // hkv
    kd, vd = kd.repeat_interleave(g, 1), vd.repeat_interleave(g, 1)
    s = (qd @ kd.transpose(-1, -2)) * scale
    if c["causal"]:  # bottom-right aligned, as FlashAttention's causal
        m = torch.ones(sq, skv, dtype=torch.bool, device="cuda").tril(skv - sq)
        s = s.masked_fill(~m, float("-inf"))
    ref_lse = torch.logsumexp(s, -1)
    ref_o = (torch.softmax(s, -1) @ vd).transpose(1, 2)
    fields["O_rel"] = float((o.double() - ref_o).abs().max() / ref_o.abs().max())
    fields["LSE_abs"] = float((lse.double() - ref_lse).abs().max())
    fields["finite"] = bool(torch.isfinite(o).all() and torch.isfinite(lse).all())
    fields["status"] = "ok"
    try:
        torch.ones(4, device="cuda").sum().item(); fields["context_after"] = "ok"
    except Exception as e2:  # noqa: BLE001
        fields["context_after"] = f"dead ({type(e2).__name__})"
    print("RESULT " + json.dumps(fields), flush=True)
    return 0


def child(c, timeout):
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one-json", json.dumps(c)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(name=c["name"], status="timeout", seconds=round(time.time() - t0, 1)), ""
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
    shape = f"{c['dtype']} B={c['b']} H={c['hq']}/{c['hkv']} Sq={c['sq']} Skv={c['skv']} D={c['d']} {'causal' if c['causal'] else 'full'}"
    if r.get("status") == "ok":
        tail = f"ok O_rel={r['O_rel']:.2e} LSE_abs={r['LSE_abs']:.2e} finite={r['finite']}"
    else:
        tail = f"{r.get('status')} {r.get('error', '')}{r.get('stderr_tail', '')} context_after={r.get('context_after', '-')}"
    print(f"RESULT name={c['name']} [{shape}] {tail} ({r.get('process_s', '?')} s)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", help="run the named configuration in this process")
    ap.add_argument("--one-json", help=argparse.SUPPRESS)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1, help="runs of the primary alone, before the neighbours")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    if a.one_json:
        return run_one(json.loads(a.one_json))
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
