"""The FlashAttention-4 and FlashInfer adapters (python/attnfuzz_py/adapters/fa4.py,
flashinfer.py) without their libraries or a GPU:

1. band_masks: every mask kind of the case format (with offsets and a composition's bands) and
   random planes; a plane taken as a band is exactly that band on the keys it keeps, and the keys
   it cuts are seen by no query; the bands FA-style kernels take are all taken.
2. The adapters' glue, against stand-ins of the two libraries that compute their documented
   semantics in float64 (FA4: [B][S][H][D], bottom-right causal and windows, natural-log LSE;
   FlashInfer: [S][H][D] per request, causal refused for kv_len < qo_len, window_left, custom
   masks, base-2 LSE): every problem an adapter takes gives the float64 Minimal adapter's O, LSE,
   dQ, dK, dV; what it declines, it declines with a reason.
3. Where the libraries are missing (here), both adapters construct and decline every problem
   with one line saying why; bad options are refused.
4. Where ci/thirdparty_carry.sh --python 3.11 has made .carry-3p-cp311/site (or
   ATTNFUZZ_3P_SITE names one), FA4 and FlashInfer import from it on this CPU and the adapters
   decline with "needs a CUDA device" (skipped otherwise).

    python test_thirdparty_adapters.py PACKAGE_DIR
"""
import os
import subprocess
import sys

sys.path.insert(0, sys.argv[1])

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: {sys.executable} has no torch/numpy ({e}; run ci/setup.sh)")
    sys.exit(77)

from attnfuzz_py import Problem  # noqa: E402
from attnfuzz_py.adapters import band_masks  # noqa: E402
from attnfuzz_py.adapters.fa4 import FA4  # noqa: E402
from attnfuzz_py.adapters.flashinfer import FlashInfer  # noqa: E402
from attnfuzz_py.adapters.minimal import Minimal  # noqa: E402
from attnfuzz_py.masks import dense_from_mask_mod, mask_mod_for  # noqa: E402

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL", what)


def problem(b, hq, hkv, sq, skv, dqk, dv, mask, softcap=None, q_offset=0, kv_offset=0, full=None, restrictions=(), dtype="bf16"):
    fq, fkv = full or (sq, skv)
    fields = dict(batch=b, heads_q=hq, heads_kv=hkv, seq_q=sq, seq_kv=skv, head_dim_qk=dqk, head_dim_v=dv, dtype=dtype,
                  scale=dqk ** -0.5, softcap=softcap, mask=mask, q_offset=q_offset, kv_offset=kv_offset, full_seq_q=fq,
                  full_seq_kv=fkv, restrictions=list(restrictions))
    if mask["kind"] == "random":  # the harness draws it per (b, h, q, kv); any draw will do here
        dense = (np.random.default_rng(mask["seed"]).random((b, hq, sq, skv)) < mask["density"]).astype(np.uint8)
    else:
        dense = dense_from_mask_mod(mask_mod_for(Problem(fields)), b, hq, sq, skv).numpy().astype(np.uint8)
    return Problem(fields, dense)


# 1. band_masks ------------------------------------------------------------------------------------

def check_band(plane, what):
    band, why = band_masks.band_of_plane(plane)
    if band is None:
        check(bool(why), f"{what}: declined without a reason")
        return None
    lo, hi = band.kv_lo, band.kv_hi
    check(not plane[:, :lo].any() and not plane[:, hi:].any(), f"{what}: cut keys that a query sees")
    if hi > lo:
        check(np.array_equal(band_masks.band_plane(plane.shape[0], hi - lo, band.left, band.right), plane[:, lo:hi]),
              f"{what}: {band.describe()} is not the plane")
    return band


def test_bands():
    sq_skv = [(1, 1), (5, 5), (4, 9), (9, 4), (16, 16), (7, 3)]
    exprs = [{"kind": "none"}]
    for align in ("top_left", "bottom_right"):
        exprs.append({"kind": "causal", "align": align})
        for left, right in ((2, 0), (3, 1), (-1, 2), (0, 0), (1, -1), (0, 5)):
            exprs.append({"kind": "sliding_window", "left": left, "right": right, "align": align})
        exprs.append({"kind": "prefix_lm", "prefix": 2, "align": align})
    exprs.append({"kind": "document", "segments_q": [2, 3, 11], "segments_kv": [2, 3, 11]})
    exprs.append({"kind": "not", "args": [{"kind": "causal", "align": "top_left"}]})
    taken = 0
    for sq, skv in sq_skv:
        for e in exprs:
            p = problem(1, 1, 1, sq, skv, 8, 8, e)
            band = check_band(p.mask[0, 0] != 0, f"{e} {sq}x{skv}")
            taken += band is not None
            plane, why = band_masks.expression_plane(p)
            check(why is None and np.array_equal(plane, p.mask[0, 0] != 0), f"{e}: expression_plane differs from the dense mask")
            if e["kind"] in ("none", "causal") or (e["kind"] == "sliding_window" and e["align"] == "bottom_right"
                                                    and min(e["left"], e["right"]) >= 0):
                check(band is not None, f"{e} {sq}x{skv}: a band FA takes was declined")
    # a composition's part: queries [4, 8) of a causal 8x8, keys [0, 8); and a kv part with a band restriction
    p = problem(1, 1, 1, 4, 8, 8, 8, {"kind": "causal", "align": "top_left"}, q_offset=4, full=(8, 8))
    band = check_band(p.mask[0, 0] != 0, "q part of causal")
    check(band is not None and band.kind == "causal" and (band.kv_lo, band.kv_hi) == (0, 8), f"q part of causal: {band}")
    p = problem(1, 1, 1, 8, 4, 8, 8, {"kind": "causal", "align": "top_left"}, kv_offset=4, full=(8, 8))
    band = check_band(p.mask[0, 0] != 0, "kv part of causal")
    check(band is not None and band.kind == "causal", f"kv part of causal: {band}")
    rng = np.random.default_rng(3)
    for i in range(300):
        sq, skv = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        plane = rng.random((sq, skv)) < rng.choice([0.1, 0.5, 0.9, 1.0])
        check_band(plane, f"random plane {i}")
    for i in range(300):  # random bands, then cut or padded keys
        sq, n = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        left = None if rng.random() < 0.3 else int(rng.integers(0, 12))
        right = None if rng.random() < 0.3 else int(rng.integers(0, 12))
        plane = band_masks.band_plane(sq, n, left, right)
        pad_lo, pad_hi = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        plane = np.pad(plane, ((0, 0), (pad_lo, pad_hi)))
        band = check_band(plane, f"random band {i} ({left}, {right}) sq={sq} n={n}")
        check(band is not None, f"random band {i} ({left}, {right}) sq={sq} n={n}: declined")
    print(f"band_masks: {taken} of {len(sq_skv) * len(exprs)} case-format masks are bands; 600 random planes and bands exact")


# 2. the adapters' glue against stand-ins ----------------------------------------------------------

def attend64(q, k, v, scale, softcap, visible):
    """float64 [..][Sq][D] attention with a bool visible [Sq][Skv] (or broadcastable): O, natural-log LSE."""
    s = scale * q.double() @ k.double().transpose(-1, -2)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    prob = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return prob @ v.double(), lse


class FakeFA4:
    """flash_attn.cute.interface's two entry points, in float64, FA's semantics."""

    @staticmethod
    def _visible(sq, skv, causal, window):
        left, right = window
        if causal:
            left, right = None, 0
        return torch.from_numpy(band_masks.band_plane(sq, skv, left, right))

    def flash_attn_func(self, q, k, v, softmax_scale=None, causal=False, window_size=(None, None), softcap=0.0,
                        deterministic=False, return_lse=False):
        b, sq, hq, d = q.shape
        skv, hkv = k.shape[1], k.shape[2]
        g = hq // hkv
        qh = q.transpose(1, 2)
        kh = k.transpose(1, 2).repeat_interleave(g, 1)
        vh = v.transpose(1, 2).repeat_interleave(g, 1)
        o, lse = attend64(qh, kh, vh, softmax_scale, softcap, self._visible(sq, skv, causal, window_size))
        return o.to(q.dtype).transpose(1, 2), lse.float()

    def _flash_attn_bwd(self, q, k, v, out, dout, lse, softmax_scale, causal, softcap, window_size_left=None,
                        window_size_right=None, deterministic=False, dlse=None):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        o, l = self.flash_attn_func(q, k, v, softmax_scale, causal, (window_size_left, window_size_right), softcap,
                                    return_lse=True)
        return torch.autograd.grad([o, l], [q, k, v], [dout, dlse])


class FakeFlashInfer:
    """flashinfer.single_prefill_with_kv_cache in float64, FlashInfer's semantics and base-2 LSE."""

    def single_prefill_with_kv_cache(self, q, k, v, causal=False, sm_scale=None, window_left=-1, logits_soft_cap=None,
                                     custom_mask=None, backend="auto", return_lse=False, use_fp16_qk_reduction=False,
                                     kv_layout="NHD"):
        assert kv_layout == "NHD" and return_lse
        for t in (q, k, v):
            assert t.stride(-1) == 1 and all(s % 8 == 0 for s in t.stride()[:-1]), "a layout FlashInfer cannot read"
        sq, hq, _ = q.shape
        skv, hkv, _ = k.shape
        if causal and skv < sq:
            raise RuntimeError("When mask_mode is set to MaskMode::kCausal, kv_len must be greater than or equal to qo_len")
        qi = torch.arange(sq)[:, None]
        kj = torch.arange(skv)[None, :]
        if custom_mask is not None:
            visible = custom_mask.bool()
        else:
            visible = torch.ones(sq, skv, dtype=torch.bool)
            if causal:
                visible &= kj <= qi + skv - sq
            if window_left >= 0:
                visible &= kj + sq + window_left >= skv + qi
        g = hq // hkv
        o, lse = attend64(q.transpose(0, 1), k.transpose(0, 1).repeat_interleave(g, 0), v.transpose(0, 1).repeat_interleave(g, 0),
                          sm_scale, logits_soft_cap, visible)
        return o.to(q.dtype).transpose(0, 1), (lse / np.log(2.0)).float().transpose(0, 1)


def with_fake(cls, fake, **attrs):
    a = cls.__new__(cls)
    a.__dict__.update(_why_not=None, _fi=fake, _bands=band_masks.BandCache(), _stats={},
                      _totals={"compile_s": 0.0, "compiles": 0, "run_s": 0.0, "calls": 0}, name=cls.__name__.lower(), **attrs)
    return a


def compare(adapter, p, what, rng):
    """Returns "ok", or "declined: why"; a wrong number is a failure."""
    why = adapter.supports(p)
    if why:
        check(isinstance(why, str) and "\n" not in why, f"{what}: a reason of more than one line")
        return "declined: " + why
    g = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    q = torch.randn(p.batch, p.heads_q, p.seq_q, p.head_dim_qk, generator=g)
    k = torch.randn(p.batch, p.heads_kv, p.seq_kv, p.head_dim_qk, generator=g)
    v = torch.randn(p.batch, p.heads_kv, p.seq_kv, p.head_dim_v, generator=g)
    d_o = torch.randn(p.batch, p.heads_q, p.seq_q, p.head_dim_v, generator=g)
    d_lse = torch.randn(p.batch, p.heads_q, p.seq_q, generator=g)
    exact = Minimal()
    want = [x.double() for x in exact.forward(p, q, k, v)]
    want += [x.double() for x in exact.backward(p, q, k, v, want[0], want[1], d_o, d_lse)]
    o, lse = adapter.forward(p, q, k, v)
    got = [o, lse] + list(adapter.backward(p, q, k, v, o, lse, d_o, d_lse))
    for name, w, x in zip(["O", "LSE", "dQ", "dK", "dV"], want, got):
        x = x.double()
        if w.shape != x.shape:
            check(False, f"{what} {name}: shape {tuple(x.shape)}, expected {tuple(w.shape)}")
            continue
        fin = torch.isfinite(w)
        if not torch.equal(fin, torch.isfinite(x)) or not torch.equal(w[~fin], x[~fin]):
            check(False, f"{what} {name}: the infinite entries differ")
            continue
        err = (w[fin] - x[fin]).abs().max().item() if fin.any() else 0.0
        check(err <= 1e-5 * max(1.0, w[fin].abs().max().item() if fin.any() else 1.0), f"{what} {name}: off by {err:.3g}")
    return "ok"


def test_glue():
    rng = np.random.default_rng(5)
    masks = [{"kind": "none"}, {"kind": "causal", "align": "top_left"}, {"kind": "causal", "align": "bottom_right"},
             {"kind": "sliding_window", "left": 3, "right": 0, "align": "bottom_right"},
             {"kind": "sliding_window", "left": 2, "right": 4, "align": "bottom_right"},
             {"kind": "sliding_window", "left": 5, "right": -1, "align": "top_left"},
             {"kind": "prefix_lm", "prefix": 3, "align": "top_left"},
             {"kind": "document", "segments_q": [3, 13], "segments_kv": [3, 13]},
             {"kind": "random", "density": 0.5, "seed": 7}]
    # Head dims 64 reach FlashInfer (which takes multiples of 64 only); 16, 32 and 8 reach FA4 alone.
    shapes = [(2, 4, 2, 16, 16, 64, 64), (1, 2, 2, 9, 16, 64, 64), (1, 2, 1, 16, 6, 16, 16), (2, 3, 3, 5, 5, 16, 32),
              (1, 1, 1, 1, 1, 8, 8)]
    # The stand-ins have no FA4-1 (small head dims), so the adapter's glue is tested there too.
    adapters = [("FA4", with_fake(FA4, FakeFA4(), deterministic=False, explicit=False, _decline_known=False)),
                ("FA4 explicit", with_fake(FA4, FakeFA4(), deterministic=True, explicit=True, _decline_known=False)),
                ("FlashInfer", with_fake(FlashInfer, FakeFlashInfer(), backend="auto", mask_mode="auto", fp16_qk=False,
                                         contracts={"fp16": "fp16", "bf16": "bf16"})),
                ("FlashInfer native", with_fake(FlashInfer, FakeFlashInfer(), backend="fa2", mask_mode="native", fp16_qk=False,
                                                contracts={"fp16": "fp16", "bf16": "bf16"}))]
    tally = {}
    for name, a in adapters:
        full = name in ("FA4", "FlashInfer")  # the variants: fewer problems (the glue they differ in is small)
        for shape in shapes:
            for m in masks:
                for softcap in (None, 7.0) if full else (None,):
                    for part in ("whole", "q part", "kv part") if full else ("whole", "kv part"):
                        b, hq, hkv, sq, skv, dqk, dv = shape
                        if part == "whole":
                            p = problem(b, hq, hkv, sq, skv, dqk, dv, m, softcap)
                        elif part == "q part" and sq >= 2:
                            p = problem(b, hq, hkv, sq - sq // 2, skv, dqk, dv, m, softcap, q_offset=sq // 2, full=(sq, skv))
                        elif part == "kv part" and skv >= 2:
                            p = problem(b, hq, hkv, sq, skv - skv // 2, dqk, dv, m, softcap, kv_offset=skv // 2, full=(sq, skv))
                        else:
                            continue
                        r = compare(a, p, f"{name} {shape} {m['kind']} softcap={softcap} {part}", rng)
                        if os.environ.get("VERBOSE") and r != "ok":
                            print(f"  {name} {shape} {m} softcap={softcap} {part}: {r}")
                        key = (name, "ok" if r == "ok" else "declined")
                        tally[key] = tally.get(key, 0) + 1
    for name, _ in adapters:
        print(f"{name}: {tally.get((name, 'ok'), 0)} problems = float64 Minimal (O LSE dQ dK dV), "
              f"{tally.get((name, 'declined'), 0)} declined with a reason")
    # what must be taken: FA4 the band masks; FlashInfer auto everything that is the same over heads
    for name, a in adapters:
        for m in masks[:5] if "native" not in name else masks[:4]:  # FlashInfer's own windows have no right bound but 0
            p = problem(1, 2, 2, 16, 16, 64, 64, m)
            check(a.supports(p) is None, f"{name} declined {m}: {a.supports(p)}")
    flashinfer = adapters[2][1]
    check("#1048" in (flashinfer.supports(problem(1, 2, 2, 8, 8, 64, 32, {"kind": "none"})) or ""), "FlashInfer took Dv = 32")
    check("#4299" in (flashinfer.supports(problem(1, 2, 2, 8, 8, 96, 96, {"kind": "none"})) or ""), "FlashInfer took D = 96")
    fa4 = adapters[0][1]
    check("GQA" in (fa4.supports(problem(1, 4, 2, 8, 8, 16, 32, {"kind": "none"})) or ""), "FA4 took GQA with Dqk != Dv")
    check("head dims" in (fa4.supports(problem(1, 1, 1, 8, 8, 12, 12, {"kind": "none"})) or ""), "FA4 took Dqk = 12")
    fa4_default = with_fake(FA4, FakeFA4(), deterministic=False, explicit=False)
    check("FA4-1" in (fa4_default.supports(problem(1, 2, 2, 8, 8, 48, 48, {"kind": "none"})) or ""), "FA4 took D = 48 (FA4-1)")
    check(fa4_default.supports(problem(1, 2, 2, 8, 8, 64, 64, {"kind": "none"})) is None, "FA4 declined D = 64")


# 3. unavailable here, and the options --------------------------------------------------------------

def test_unavailable():
    p = problem(1, 1, 1, 4, 4, 64, 64, {"kind": "causal", "align": "top_left"})
    for cls, opts, lib in ((FA4, {}, "flash_attn"), (FA4, {"deterministic": "true", "backward": "explicit"}, "flash_attn"),
                           (FlashInfer, {}, "flashinfer"), (FlashInfer, {"backend": "fa3", "mask": "native"}, "flashinfer")):
        try:
            __import__(lib)
            print(f"note: {lib} imports here; the unavailable case is not checked")
            continue
        except Exception:  # noqa: BLE001
            pass
        a = cls(**opts)
        why = a.supports(p)
        check(isinstance(why, str) and "not importable" in why and "\n" not in why, f"{cls.__name__}{opts}: {why!r}")
        print(f"{cls.__name__}{opts}: py.{a.name} declines: {why}")
    for cls, opts in ((FA4, {"deterministic": "yes"}), (FA4, {"backward": "x"}), (FA4, {"cache": "x"}),
                      (FlashInfer, {"backend": "fa4"}), (FlashInfer, {"mask": "x"}), (FlashInfer, {"backend": "fa3", "mask": "custom"}),
                      (FlashInfer, {"fp16_qk_reduction": "true", "backend": "fa3"})):
        try:
            cls(**opts)
            check(False, f"{cls.__name__}{opts} was accepted")
        except ValueError:
            pass


# 4. the carried site, imported on this CPU ----------------------------------------------------------

def test_site():
    root = os.path.dirname(os.path.abspath(sys.argv[1]))
    site = os.environ.get("ATTNFUZZ_3P_SITE") or os.path.join(root, ".carry-3p-cp311", "site")
    if not os.path.isdir(site):
        print(f"note: no site at {site} (ci/thirdparty_carry.sh --python 3.11 makes one): the imports are not checked")
        return
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, os.path.join(site, "nvidia_cutlass_dsl", "dsl_packages"), sys.argv[1]]),
               CUDA_VISIBLE_DEVICES="")
    code = ("from attnfuzz_py.adapters.fa4 import FA4; from attnfuzz_py.adapters.flashinfer import FlashInfer\n"
            "from attnfuzz_py import Problem\n"
            "p = Problem(dict(batch=1, heads_q=1, heads_kv=1, seq_q=4, seq_kv=4, head_dim_qk=64, head_dim_v=64, dtype='bf16',"
            " scale=0.125, softcap=None, mask={'kind': 'none'}, q_offset=0, kv_offset=0, full_seq_q=4, full_seq_kv=4, restrictions=[]))\n"
            "for a in (FA4(), FlashInfer()): print(a.name, '|', a.version, '|', a.supports(p))\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout.strip()
    print(out)
    check(r.returncode == 0, f"the carried site: exit {r.returncode}: {r.stderr[-2000:]}")
    for line in out.splitlines():
        check("needs a CUDA device" in line, f"the carried site did not import: {line}")


test_bands()
test_glue()
test_unavailable()
test_site()
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("thirdparty adapters: ok")
