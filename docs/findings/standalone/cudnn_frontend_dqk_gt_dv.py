"""cuDNN SDPA through the cuDNN frontend's Python API with head_dim_qk > 128 and head_dim_qk != head_dim_v

Two campaign findings of the `cudnn` backend (cuDNN 9.19.0, frontend 1.32.0, H200), both at
Dqk=136, Dv=128, a shape cuDNN's own support check accepts:
  (a) lab/triage/cudnn---backend_error-85289c90.json: execute fails with err 700 (illegal address),
      bf16, B=2, Hq=6, Hkv=3, Sq=3712, Skv=29, a block-sparse mask passed as an additive bias
      [1,1,Sq,Skv] (-1e30 where masked, 0 where visible: backends/cudnn_sdpa.cpp masked_bias());
  (b) lab/triage/cudnn-dK-mismatch-9036b483.json: dK wrong (~70x the bound), forward fine, bf16,
      B=1, Hq=16, Hkv=4, Sq=895, Skv=3071, a document mask (no native cuDNN mask reproduces it, so
      the backend passes it as the same additive bias [1,1,Sq,Skv]).

Standalone: the cuDNN frontend Python API (`import cudnn`) builds and runs the graphs, torch only
allocates tensors and computes a float64 reference; nothing from attnfuzz. Every tensor is a fresh
contiguous BHSD tensor (rules out the layouts of the campaign cases), bf16 in, fp32 Stats, scale
1/sqrt(Dqk), GQA by fewer heads on K/V, a deterministic backward (as the backend asks), and the
graph attributes backends/cudnn_graph.cpp sets. The frontend's Python graph may rank a python
("FROST") engine first on sm90; the C++ backend never runs one, so by default this script pins the
first *backend* plan of the ranked list (`--any-engine` lets the frontend choose and reports which).

Each configuration runs in its own subprocess (an illegal address kills the CUDA context):

    pip install --no-deps --target /tmp/cudnnfe lab/wheels/nvidia_cudnn_frontend-1.32.0-cp312-*.whl
    PYTHONPATH=/tmp/cudnnfe python3 docs/findings/standalone/cudnn_frontend_dqk_gt_dv.py
    PYTHONPATH=/tmp/cudnnfe python3 docs/findings/standalone/cudnn_frontend_dqk_gt_dv.py --one a_136x128   # one config, in-process
    PYTHONPATH=/tmp/cudnnfe python3 docs/findings/standalone/cudnn_frontend_dqk_gt_dv.py --list

One line per configuration:
    RESULT name=... status=ok|support_refused|build_failed|exec_failed|crashed|timeout stage=... shape=... mask=...
           O=rms/max dQ=rms/max dK=rms/max dV=rms/max   (error against float64; per tensor also ref= the
           reference's rms, rnd= the rms of rounding the reference to bf16, x= rms / rnd)
           plan=... msg="..."
Always exits 0.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
import traceback

# name -> (B, Hq, Hkv, Sq, Skv, Dqk, Dv, mask, bias_heads_batches)
#   mask: none | block_sparse (random, blocks 2x4 as in case (a)) | random (elementwise) | document:<q segs>/<kv segs>
#   bias: "11" = [1,1,Sq,Skv] (what the backend passes when heads and batches agree), "bh" = [B,Hq,Sq,Skv]
DOC_B = "document:288,320,287/1043,1021,1007"
CONFIGS = {
    # 1/2: case (a) and its controls
    "a_136x128": (2, 6, 3, 3712, 29, 136, 128, "block_sparse", "11"),
    "a_128x128": (2, 6, 3, 3712, 29, 128, 128, "block_sparse", "11"),
    "a_136x136": (2, 6, 3, 3712, 29, 136, 136, "block_sparse", "11"),
    "a_136x128_biasBH": (2, 6, 3, 3712, 29, 136, 128, "block_sparse", "bh"),
    "a_136x128_nomask": (2, 6, 3, 3712, 29, 136, 128, "none", "11"),
    "a_136x128_skv32": (2, 6, 3, 3712, 32, 136, 128, "block_sparse", "11"),  # bias rows 16-byte aligned
    # 3: case (b) and its controls
    "b_136x128_doc": (1, 16, 4, 895, 3071, 136, 128, DOC_B, "11"),
    "b_128x128_doc": (1, 16, 4, 895, 3071, 128, 128, DOC_B, "11"),
    "b_136x136_doc": (1, 16, 4, 895, 3071, 136, 136, DOC_B, "11"),
    "b_136x128_nomask": (1, 16, 4, 895, 3071, 136, 128, "none", "11"),
    "b_136x128_doc_mha": (1, 16, 16, 895, 3071, 136, 128, DOC_B, "11"),  # no GQA
    # 4: small shapes and the head-dim boundary (no mask)
    "s_136x128_s128": (1, 1, 1, 128, 128, 136, 128, "none", "11"),
    "s_136x128_s128_gqa": (1, 4, 1, 128, 128, 136, 128, "none", "11"),
    "s_136x128_s128_bias": (1, 1, 1, 128, 128, 136, 128, "random", "11"),
    "d072x128_s256": (1, 2, 2, 256, 256, 72, 128, "none", "11"),
    "d130x128_s256": (1, 2, 2, 256, 256, 130, 128, "none", "11"),
    "d136x128_s256": (1, 2, 2, 256, 256, 136, 128, "none", "11"),
    "d144x128_s256": (1, 2, 2, 256, 256, 144, 128, "none", "11"),
    "d192x128_s256": (1, 2, 2, 256, 256, 192, 128, "none", "11"),
}

MASKED_BIAS = -1e30  # backends/cudnn_sdpa.cpp masked_bias() for bf16 (rounded to bf16 on upload)
UID = dict(q=1, k=2, v=3, o=4, stats=5, bias=6, dO=7, dQ=8, dK=9, dV=10)


def one_line(s, limit=400):
    s = " ".join(str(s).split())
    return s.replace('"', "'")[:limit]


def bhsd_stride(dim):
    b, h, s, d = dim
    return [h * s * d, s * d, d, 1]


# ---------------------------------------------------------------- the mask and the reference


def make_visible(torch, B, Hq, Sq, Skv, mask, bias_kind, gen):
    """Boolean [1|B, 1|Hq, Sq, Skv], True = visible, every query row sees at least one key."""
    if mask == "none":
        return None
    bb, hh = (B, Hq) if bias_kind == "bh" else (1, 1)
    dev = "cuda"
    if mask == "block_sparse":
        bq, bk = 2, 4
        blocks = torch.rand(bb, hh, -(-Sq // bq), -(-Skv // bk), generator=gen, device=dev) < 0.5
        vis = blocks.repeat_interleave(bq, 2).repeat_interleave(bk, 3)[:, :, :Sq, :Skv].contiguous()
    elif mask == "random":
        vis = torch.rand(bb, hh, Sq, Skv, generator=gen, device=dev) < 0.5
    elif mask.startswith("document:"):
        qs, ks = mask[len("document:"):].split("/")
        qs, ks = [int(x) for x in qs.split(",")], [int(x) for x in ks.split(",")]
        assert sum(qs) == Sq and sum(ks) == Skv, (qs, ks, Sq, Skv)
        seg_q = torch.repeat_interleave(torch.arange(len(qs), device=dev), torch.tensor(qs, device=dev))
        seg_k = torch.repeat_interleave(torch.arange(len(ks), device=dev), torch.tensor(ks, device=dev))
        vis = (seg_q[:, None] == seg_k[None, :]).expand(bb, hh, Sq, Skv).contiguous()
    else:
        raise ValueError(mask)
    empty = ~vis.any(-1)  # give an empty row one random visible key
    if empty.any():
        j = torch.randint(0, Skv, empty.shape, generator=gen, device=dev)
        vis.scatter_(-1, j.unsqueeze(-1), vis.gather(-1, j.unsqueeze(-1)) | empty.unsqueeze(-1))
    return vis


def reference(torch, q, k, v, bias, d_o, scale):
    """float64 softmax(Q K^T scale + bias) V, K/V head of query head h = h // (Hq / Hkv)."""
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ke, ve = k64.repeat_interleave(group, 1), v64.repeat_interleave(group, 1)
    s = (q64 @ ke.transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias.double()
    p = torch.softmax(s, -1)
    o = p @ ve
    lse = torch.logsumexp(s, -1)
    o.backward(d_o.double())
    return {"O": o.detach(), "dQ": q64.grad, "dK": k64.grad, "dV": v64.grad, "LSE": lse.detach()}


def err_fields(torch, name, x, ref):
    e = x.double() - ref
    nonfinite = int((~torch.isfinite(e)).sum())
    e = torch.nan_to_num(e, nan=0.0, posinf=0.0, neginf=0.0)
    rms = float(e.pow(2).mean().sqrt())
    mx = float(e.abs().max())
    ref_rms = float(ref.pow(2).mean().sqrt())
    rnd = float((ref.to(torch.bfloat16).double() - ref).pow(2).mean().sqrt())
    s = f"{name}={rms:.3e}/{mx:.3e} {name}_ref={ref_rms:.3e} {name}_rnd={rnd:.3e} {name}_x={rms / rnd if rnd > 0 else float('nan'):.2f}"
    if nonfinite:
        s += f" {name}_nonfinite={nonfinite}"
    if x.dim() == 4 and mx > 0:
        idx = int(e.abs().argmax())
        _, hs, ss, ds = e.shape
        b, h, r, d = idx // (hs * ss * ds), idx // (ss * ds) % hs, idx // ds % ss, idx % ds
        s += f" {name}_worst=b{b}h{h}s{r}d{d}"
    return s


# ---------------------------------------------------------------- the cuDNN graphs


class Failure(Exception):
    def __init__(self, status, stage, msg):
        super().__init__(msg)
        self.status, self.stage, self.msg = status, stage, msg


def backend_plan_index(cudnn, g, any_engine):
    """Pick the plan to run; returns (index, names of all plans)."""
    names = []
    for i in range(g.get_execution_plan_count()):
        try:
            names.append(g.get_plan_name_at_index(i))
        except Exception as e:  # noqa: BLE001
            names.append(f"?({one_line(e, 60)})")
    if any_engine:
        return None, names
    is_python = None
    try:
        from cudnn.engines.engine_ids import is_python_engine

        is_python = [bool(is_python_engine(cfg.engine_id)) for cfg in g.plans]
    except Exception:  # noqa: BLE001  (older/newer layouts: ask each plan)
        is_python = None
    for i in range(len(names)):
        if is_python is not None:
            if not is_python[i]:
                return i, names
        else:
            g.select_plan(i)
            if g.selected_engine is None:
                return i, names
    raise Failure("support_refused", "create_execution_plans", "no cuDNN backend plan in the ranked list: " + "; ".join(names))


def build(cudnn, g, any_engine):
    """validate -> build_operation_graph -> create_execution_plans([A, FALLBACK]) -> (pin a backend plan)
    -> check_support -> build_plans, like backends/cudnn_graph.cpp build(). Returns the plan's name."""
    not_supported = getattr(cudnn, "cudnnGraphNotSupportedError", ())

    def step(stage, fn, refusal_status="support_refused"):
        try:
            return fn()
        except Failure:
            raise
        except Exception as e:  # noqa: BLE001
            status = refusal_status if (not_supported and isinstance(e, not_supported)) else "build_failed"
            if stage in ("validate", "check_support") and status == "build_failed" and isinstance(e, (ValueError,)):
                status = "support_refused"
            raise Failure(status, stage, f"{type(e).__name__}: {one_line(e)}")

    step("validate", g.validate)
    step("build_operation_graph", g.build_operation_graph)
    step("create_execution_plans", lambda: g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]))
    index, names = step("select_backend_plan", lambda: backend_plan_index(cudnn, g, any_engine))
    if index is not None:
        step("select_plan", lambda: g.select_plan(index))
    step("check_support", g.check_support)

    def build_plans():
        try:
            g.build_plans(cudnn.build_plan_policy.HEURISTICS_CHOICE)
        except TypeError:
            g.build_plans()

    step("build_plans", build_plans, refusal_status="build_failed")
    chosen = getattr(g, "_plan_index", index)
    engine = None
    try:
        engine = g.selected_engine
    except Exception:  # noqa: BLE001
        pass
    try:
        name = g.get_plan_name_at_index(chosen) if chosen is not None else "?"
    except Exception:  # noqa: BLE001
        name = "?"
    side = "backend" if engine is None else "python:" + getattr(engine, "name", "?")
    return f"{side}:{name}[{chosen}/{len(names)}]"


def new_graph(cudnn, handle, name):
    return cudnn.pygraph(
        name=name,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
    )


def inputs(cudnn, g, B, Hq, Hkv, Sq, Skv, Dqk, Dv, bias_dim):
    def t(name, dim, dtype=cudnn.data_type.BFLOAT16):
        return g.tensor(name=name, dim=dim, stride=bhsd_stride(dim), data_type=dtype, uid=UID[name])

    q = t("q", [B, Hq, Sq, Dqk])
    k = t("k", [B, Hkv, Skv, Dqk])
    v = t("v", [B, Hkv, Skv, Dv])
    bias = t("bias", bias_dim) if bias_dim is not None else None
    return q, k, v, bias


def set_out(t, uid, dim, dtype=None):
    t.set_output(True).set_uid(uid).set_dim(dim).set_stride(bhsd_stride(dim))
    if dtype is not None:
        t.set_data_type(dtype)


def execute(cudnn, torch, g, pack, handle):
    try:
        ws_bytes = int(g.get_workspace_size())
    except Exception as e:  # noqa: BLE001
        raise Failure("build_failed", "get_workspace_size", f"{type(e).__name__}: {one_line(e)}")
    ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
    try:
        g.execute(pack, ws, handle=handle)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        raise Failure("exec_failed", "execute", f"{type(e).__name__}: {one_line(e)}")
    return ws_bytes


# ---------------------------------------------------------------- one configuration


def run_one(name, any_engine):
    import torch

    B, Hq, Hkv, Sq, Skv, Dqk, Dv, mask, bias_kind = CONFIGS[name]
    shape = f"B{B}_Hq{Hq}_Hkv{Hkv}_Sq{Sq}_Skv{Skv}_Dqk{Dqk}_Dv{Dv}"
    mask_desc = "none" if mask == "none" else (mask.split(":")[0] + (f"_bias[{'B,Hq' if bias_kind == 'bh' else '1,1'}]"))
    head = f"RESULT name={name}"
    tail = f"shape={shape} mask={mask_desc}"
    stage, plans = "import", []
    try:
        import cudnn
    except Exception as e:  # noqa: BLE001
        print(f'{head} status=build_failed stage=import {tail} msg="{type(e).__name__}: {one_line(e)}"', flush=True)
        return
    try:
        gen = torch.Generator(device="cuda").manual_seed(1234)
        q = torch.randn(B, Hq, Sq, Dqk, generator=gen, device="cuda").to(torch.bfloat16)
        k = torch.randn(B, Hkv, Skv, Dqk, generator=gen, device="cuda").to(torch.bfloat16)
        v = torch.randn(B, Hkv, Skv, Dv, generator=gen, device="cuda").to(torch.bfloat16)
        d_o = torch.randn(B, Hq, Sq, Dv, generator=gen, device="cuda").to(torch.bfloat16)
        vis = make_visible(torch, B, Hq, Sq, Skv, mask, bias_kind, gen)
        bias = None
        if vis is not None:
            bias = torch.where(vis, 0.0, MASKED_BIAS).to(torch.bfloat16).contiguous()
        scale = 1.0 / math.sqrt(Dqk)
        scale32 = float(torch.tensor(scale, dtype=torch.float32))  # cuDNN takes an fp32 scale

        handle = cudnn.create_handle()
        try:
            cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
        except Exception:  # noqa: BLE001
            pass
        bias_dim = list(bias.shape) if bias is not None else None

        # forward: O and fp32 Stats [B, Hq, Sq, 1]
        stage = "forward"
        gf = new_graph(cudnn, handle, "fwd")
        tq, tk, tv, tb = inputs(cudnn, gf, B, Hq, Hkv, Sq, Skv, Dqk, Dv, bias_dim)
        kw = dict(name="sdpa", q=tq, k=tk, v=tv, generate_stats=True, attn_scale=scale32)
        if tb is not None:
            kw["bias"] = tb
        try:
            res = gf.sdpa(**kw)
        except TypeError:  # an older binding without generate_stats
            kw.pop("generate_stats")
            res = gf.sdpa(is_inference=False, **kw)
        to, ts = res[0], res[1]
        set_out(to, UID["o"], [B, Hq, Sq, Dv])
        set_out(ts, UID["stats"], [B, Hq, Sq, 1], cudnn.data_type.FLOAT)
        plan_f = build(cudnn, gf, any_engine)
        plans.append("fwd=" + plan_f)
        o = torch.empty(B, Hq, Sq, Dv, dtype=torch.bfloat16, device="cuda").fill_(float("nan"))
        stats = torch.empty(B, Hq, Sq, 1, dtype=torch.float32, device="cuda").fill_(float("nan"))
        pack = {tq: q, tk: k, tv: v, to: o, ts: stats}
        if tb is not None:
            pack[tb] = bias
        execute(cudnn, torch, gf, pack, handle)

        # backward from cuDNN's own O and Stats
        stage = "backward"
        gb = new_graph(cudnn, handle, "bwd")
        tq, tk, tv, tb = inputs(cudnn, gb, B, Hq, Hkv, Sq, Skv, Dqk, Dv, bias_dim)
        odim = [B, Hq, Sq, Dv]
        to = gb.tensor(name="o", dim=odim, stride=bhsd_stride(odim), data_type=cudnn.data_type.BFLOAT16, uid=UID["o"])
        tdo = gb.tensor(name="dO", dim=odim, stride=bhsd_stride(odim), data_type=cudnn.data_type.BFLOAT16, uid=UID["dO"])
        sdim = [B, Hq, Sq, 1]
        ts = gb.tensor(name="stats", dim=sdim, stride=bhsd_stride(sdim), data_type=cudnn.data_type.FLOAT, uid=UID["stats"])
        kw = dict(name="sdpa_backward", q=tq, k=tk, v=tv, o=to, dO=tdo, stats=ts, attn_scale=scale32, use_deterministic_algorithm=True)
        if tb is not None:
            kw["bias"] = tb
        tdq, tdk, tdv = gb.sdpa_backward(**kw)[:3]
        set_out(tdq, UID["dQ"], [B, Hq, Sq, Dqk])
        set_out(tdk, UID["dK"], [B, Hkv, Skv, Dqk])
        set_out(tdv, UID["dV"], [B, Hkv, Skv, Dv])
        plan_b = build(cudnn, gb, any_engine)
        plans.append("bwd=" + plan_b)
        dq = torch.full((B, Hq, Sq, Dqk), float("nan"), dtype=torch.bfloat16, device="cuda")
        dk = torch.full((B, Hkv, Skv, Dqk), float("nan"), dtype=torch.bfloat16, device="cuda")
        dv = torch.full((B, Hkv, Skv, Dv), float("nan"), dtype=torch.bfloat16, device="cuda")
        pack = {tq: q, tk: k, tv: v, to: o, tdo: d_o, ts: stats, tdq: dq, tdk: dk, tdv: dv}
        if tb is not None:
            pack[tb] = bias
        execute(cudnn, torch, gb, pack, handle)

        stage = "reference"
        ref = reference(torch, q, k, v, bias, d_o, scale32)
        fields = [
            err_fields(torch, "O", o, ref["O"]),
            err_fields(torch, "dQ", dq, ref["dQ"]),
            err_fields(torch, "dK", dk, ref["dK"]),
            err_fields(torch, "dV", dv, ref["dV"]),
        ]
        lse_err = (stats.squeeze(-1).double() - ref["LSE"]).abs()
        fields.append(f"LSE_max={float(torch.nan_to_num(lse_err, nan=float('inf')).max()):.3e}")
        print(f"{head} status=ok stage=done {tail} " + " ".join(fields) + f' plan="{" ".join(plans)}"', flush=True)
    except Failure as f:
        print(f'{head} status={f.status} stage={stage}.{f.stage} {tail} plan="{" ".join(plans)}" msg="{f.msg}"', flush=True)
    except Exception as e:  # noqa: BLE001  (anything else: report where)
        tb_last = one_line(traceback.format_exc().strip().splitlines()[-3:], 300)
        status = "exec_failed" if stage == "reference" or "CUDA" in str(e) else "build_failed"
        print(f'{head} status={status} stage={stage}.python {tail} plan="{" ".join(plans)}" msg="{type(e).__name__}: {one_line(e)} | {tb_last}"', flush=True)


def versions():
    import torch

    line = [f"torch={torch.__version__}", f"torch_cuda={torch.version.cuda}"]
    try:
        line.append(f"gpu={torch.cuda.get_device_name(0).replace(' ', '_')}")
        line.append("cc=%d.%d" % torch.cuda.get_device_capability(0))
    except Exception as e:  # noqa: BLE001
        line.append(f"gpu=unavailable({one_line(e, 80)})")
    line.append(f"torch_cudnn={torch.backends.cudnn.version()}")
    try:
        import cudnn

        line.append(f"cudnn_frontend={getattr(cudnn, '__version__', '?')}")
        line.append(f"cudnn_frontend_path={os.path.dirname(cudnn.__file__)}")
        line.append(f"cudnn_backend_version={cudnn.backend_version()}")
        try:
            line.append(f"cudnn_backend_version_string={cudnn.backend_version_string()}")
        except Exception:  # noqa: BLE001
            pass
    except Exception as e:  # noqa: BLE001
        line.append(f"cudnn=unavailable({type(e).__name__}: {one_line(e, 200)})")
    print("VERSIONS " + " ".join(line), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", help="run one configuration in this process")
    ap.add_argument("--only", help="comma-separated configuration names (default: all)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--jobs", type=int, default=3, help="subprocesses at a time (default 3)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per subprocess")
    ap.add_argument("--any-engine", action="store_true", help="let the frontend pick any plan (python engines too)")
    args = ap.parse_args()
    try:
        if args.list:
            for n, c in CONFIGS.items():
                print(n, c)
            return
        if args.one:
            if args.one not in CONFIGS:
                print(f'RESULT name={args.one} status=build_failed stage=args msg="unknown configuration"', flush=True)
                return
            run_one(args.one, args.any_engine)
            return
        versions()
        names = [n for n in (args.only.split(",") if args.only else CONFIGS) if n]
        print("# errors: rms/max of (cuDNN - float64 reference); _ref = reference rms; _rnd = rms of rounding the reference "
              "to bf16; _x = rms / _rnd (a correct bf16 kernel is a few units)", flush=True)
        start = time.time()
        pending, running, results = list(names), {}, {}
        while pending or running:
            while pending and len(running) < max(1, args.jobs):
                n = pending.pop(0)
                cmd = [sys.executable, os.path.abspath(__file__), "--one", n] + (["--any-engine"] if args.any_engine else [])
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                running[n] = (p, time.time())
            for n, (p, t0) in list(running.items()):
                if p.poll() is None and time.time() - t0 < args.timeout:
                    continue
                if p.poll() is None:
                    p.kill()
                out, err = p.communicate()
                lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
                if lines:
                    results[n] = lines[-1]
                else:
                    status = "timeout" if time.time() - t0 >= args.timeout else "crashed"
                    tail = one_line(" | ".join((err or out).strip().splitlines()[-4:]), 400)
                    results[n] = f'RESULT name={n} status={status} stage=subprocess rc={p.returncode} msg="{tail}"'
                if p.returncode not in (0, None) or (err and "Error" in err and not lines):
                    results[n] += f" rc={p.returncode}"
                print(results[n], flush=True)
                del running[n]
            time.sleep(0.05)
        print(f"# {len(names)} configurations in {time.time() - start:.1f} s", flush=True)
        summary = {n: results[n].split(" status=")[1].split()[0] for n in names}
        print("SUMMARY " + json.dumps(summary), flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"# driver error: {type(e).__name__}: {one_line(e)}", flush=True)
    finally:
        sys.stdout.flush()


if __name__ == "__main__":
    main()
    sys.exit(0)
