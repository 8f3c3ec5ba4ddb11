"""FlashInfer's prefill attention (PyPI flashinfer-python) as an attnfuzz backend: its forward,
with a float32 backward of this adapter's own (FlashInfer has no attention backward).

    py:attnfuzz_py.adapters.flashinfer:FlashInfer[?backend=auto|fa2|fa3][&mask=auto|native|custom][&fp16_qk_reduction=false|true]

flashinfer.single_prefill_with_kv_cache(q, k, v, causal, sm_scale, window_left,
logits_soft_cap, custom_mask, backend, use_fp16_qk_reduction, return_lse=True), once per batch
element, in FlashInfer's NHD layout ([S][H][D]: views of attnfuzz's tensors, copied only where
FlashInfer's kernels could not read them: a last dimension that is not contiguous, strides or a
base that are not 16-byte aligned). GQA native. FlashInfer JIT-compiles each kernel with nvcc
(minutes on first use: marked as compile time, attnfuzz_py.compiling); its modules are kept in
$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer (default: the home directory).

backend: FlashInfer's own choice (auto: fa3, its Hopper kernels, where they exist for the head
dims and no custom mask is needed, else fa2), or one forced. The fa3 prefill takes Dqk == Dv in
{64, 128, 256} or (Dqk, Dv) = (192, 128), and no custom mask (flashinfer/utils.py,
is_fa3_prefill_head_dim_supported, is_fa3_backend_supported).

LSE: FlashInfer's is in base 2 (its kernels keep log2 sums: lse = log2(d) + m with the scores
scaled by log2(e)); returned here times ln 2, the natural log the harness compares.

Masks: FlashInfer's own are causal and a left window (window_left), both aligned to the
bottom-right corner, and a custom mask (a packed bit mask per request, the same for every head;
fa2 only). mask=native takes the harness's dense mask only where it is one of FlashInfer's own
after the keys no query sees are cut off (band_masks.py); mask=custom always hands it over as the
custom mask; mask=auto (default) takes the native form where there is one and the custom mask
otherwise (which FlashInfer runs on fa2). A mask that differs between heads is declined.

The backward is not FlashInfer's: it is the flash backward's formula in float32 (torch, on the
GPU, no TF32) from the O and LSE FlashInfer's forward returned (P = exp(S - LSE), D = rowsum(dO *
O), dS = P (dP - D + dLSE)), so dQ, dK and dV test FlashInfer's O and LSE a second time, never a
FlashInfer kernel; the version string says so. (attnfuzz's Adapter API has no forward-only
declaration: every backend's run goes through its backward.)

fp16_qk_reduction=true: FlashInfer's use_fp16_qk_reduction (fa2, fp16: Q K^T accumulated in
fp16, "faster at the cost of slight precision loss"), still declared fp16: the harness judges
whether that holds the fp16 contract.

Where flashinfer cannot be imported (this repository's CPU machines), every problem is declined
with the import error, in one line.
"""
import math
import sys

import numpy as np
import torch

from attnfuzz_py import Adapter, compile_time
from attnfuzz_py.adapters.band_masks import BandCache, band_of_mask, same_over
from attnfuzz_py.masks import contains_random

_LN2 = math.log(2.0)
_FA3_HEAD_DIMS = {(64, 64), (128, 128), (256, 256), (192, 128)}


def _one_line(e):
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def import_flashinfer():
    """(flashinfer, version text), its JIT builds marked as compile time; raises what the import raised."""
    import flashinfer
    from flashinfer.jit import core as jit_core
    if not getattr(jit_core.JitSpec.build_and_load, "_attnfuzz_marked", False):
        inner = jit_core.JitSpec.build_and_load

        def build_and_load(self, *args, **kwargs):  # a cached module loads at once; a build (or a wait for another's) is compile time
            with compile_time.compiling():
                return inner(self, *args, **kwargs)
        build_and_load._attnfuzz_marked = True
        jit_core.JitSpec.build_and_load = build_and_load
    return flashinfer, f"flashinfer {getattr(flashinfer, '__version__', '?')}"


def _readable(t):
    """t as FlashInfer's kernels read it: last dimension contiguous, other strides and the base 16-byte aligned."""
    es = t.element_size()
    ok = t.stride(-1) == 1 and all((s * es) % 16 == 0 for s in t.stride()[:-1]) and t.data_ptr() % 16 == 0
    return t if ok else t.contiguous()


class FlashInfer(compile_time.CallTimes, Adapter):
    device = "cuda"
    contracts = {"fp16": "fp16", "bf16": "bf16"}
    backward_takes_dlse = True
    masked_rows_zero = True
    returns_lse = True
    api = "flashinfer.single_prefill_with_kv_cache"

    def __init__(self, backend="auto", mask="auto", fp16_qk_reduction="false"):
        if backend not in ("auto", "fa2", "fa3"):
            raise ValueError(f"backend={backend}: one of auto, fa2, fa3")
        if mask not in ("auto", "native", "custom"):
            raise ValueError(f"mask={mask}: one of auto, native, custom")
        if fp16_qk_reduction not in ("false", "true"):
            raise ValueError(f"fp16_qk_reduction={fp16_qk_reduction}: one of false, true")
        if backend == "fa3" and mask == "custom":
            raise ValueError("backend=fa3 takes no custom mask: use mask=native or auto")
        self.backend, self.mask_mode = backend, mask
        self.fp16_qk = fp16_qk_reduction == "true"
        if self.fp16_qk:
            if backend == "fa3":
                raise ValueError("fp16_qk_reduction is FlashInfer's fa2 only")
            self.contracts = {"fp16": "fp16"}
        self.name = ("flashinfer" + ("" if backend == "auto" else f".{backend}") + ("" if mask == "auto" else f".{mask}_mask")
                     + (".fp16qk" if self.fp16_qk else ""))
        # What campaigns aim at: the head dims FlashInfer instantiates on every path (64, 128, 256;
        # 192 too, through fa2 under auto), one head dim, no mask or causal (supports() also takes
        # windows and the custom mask, outside the envelope).
        self.envelope = {"dtypes": sorted(self.contracts), "max_head_dim": 256, "head_dim_multiple": 64,
                         "distinct_head_dims": False, "grouped_heads": True, "softcap": True, "masks": "causal_or_none"}
        self._why_not = None
        self._bands = BandCache()
        compile_time.CallTimes.__init__(self)
        try:
            self._fi, lib = import_flashinfer()
        except Exception as e:  # noqa: BLE001 - any import failure declines
            self._why_not = f"FlashInfer is not importable in this Python: {_one_line(e)}"
            self.version = "flashinfer missing"
            return
        cc = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        if cc is None:
            self._why_not = "FlashInfer needs a CUDA device; none is visible to this Python"
        elif backend == "fa3" and cc[0] != 9:
            self._why_not = f"FlashInfer's fa3 backend is Hopper's (sm90); this GPU is sm{cc[0]}{cc[1]}"
        self.version = (lib + (f", sm{cc[0]}{cc[1]}" if cc else "") + f", backend {backend}, mask {mask}"
                        + (", use_fp16_qk_reduction" if self.fp16_qk else "")
                        + "; backward: float32 torch from FlashInfer's O and LSE (FlashInfer has no backward)")

    @staticmethod
    def _native_ok(band, seq_q):
        """Whether FlashInfer's causal / window_left express the band (right bound: none or the
        diagonal). Its causal mode refuses kv_len < qo_len ("kv_len must be greater than or equal
        to qo_len", prefill.cuh): such a band goes to the custom mask."""
        causal = band.kind == "causal" or (band.kind == "window" and band.right == 0)
        if causal and band.kv_hi - band.kv_lo < seq_q:
            return False
        if band.kind in ("none", "causal"):
            return True
        return band.kind == "window" and band.right in (None, 0) and band.left is not None and band.left >= 0

    def supports(self, p):
        if self._why_not:
            return self._why_not
        if p.dtype not in self.contracts:
            return f"FlashInfer prefill here takes {' and '.join(sorted(self.contracts))} only"
        dims = (p.head_dim_qk, p.head_dim_v)
        if self.backend == "fa3" and dims not in _FA3_HEAD_DIMS:
            return "FlashInfer's fa3 prefill takes Dqk == Dv in {64, 128, 256} or (192, 128), got " + f"{dims}"
        # Known upstream, so declined: FA2's prefill validates no head dim; multiples of 16 that are
        # not of 64 fault (illegal memory access) and others return wrong values (flashinfer#4299,
        # fix proposed in #4312); Dv = 32 raises "Invalid configuration" (flashinfer#1048; seen on
        # the H200 at Dqk = 64, Dv = 32).
        for what, d in (("Dqk", p.head_dim_qk), ("Dv", p.head_dim_v)):
            if not 64 <= d <= 256 or d % 64:
                return (f"FlashInfer's prefill takes head dims 64, 128, 192, 256 (others fault or err: "
                        f"flashinfer#4299, #1048), got {what}={d}")
        if min(p.batch, p.seq_q) == 0:
            return "FlashInfer's prefill needs at least one query"
        band, why = (None, None) if self.mask_mode == "custom" else self._bands.band(p)
        if band is not None and band.kind != "empty" and self._native_ok(band, p.seq_q):
            return None
        if self.mask_mode == "native" or self.backend == "fa3":
            if why is None and (band.kind == "causal" or (band.kind == "window" and band.right == 0)) \
                    and band.kv_hi - band.kv_lo < p.seq_q:
                why = f"this mask is {band.describe()}, and FlashInfer's causal mode needs kv_len >= qo_len"
            return ("FlashInfer's own masks are causal and a left window (bottom-right aligned): "
                    + (why or f"this mask is {band.describe()}"))
        # The custom mask (fa2): one bit mask per request, the same for every head.
        if p.seq_kv == 0:
            return "FlashInfer's prefill needs at least one key"
        if contains_random(p.mask_expr) and p.heads_q > 1:
            return "a random mask differs between heads; FlashInfer's custom mask is one per request, shared by its heads"
        return None


    def forward(self, p, q, k, v):
        mask = p.mask
        if not same_over(mask, (1,)):
            raise RuntimeError("attnfuzz_py: the mask differs between heads although supports() took it (a bridge bug)")
        bands = None
        if self.mask_mode != "custom":
            bands, why = band_of_mask(mask, per_batch=True)
            if why and (self.mask_mode == "native" or self.backend == "fa3"):
                raise RuntimeError(f"attnfuzz_py: the dense mask is no native FlashInfer mask although its expression is ({why})")
        o = torch.empty(p.batch, p.heads_q, p.seq_q, p.head_dim_v, dtype=q.dtype, device=q.device)
        lse = torch.empty(p.batch, p.heads_q, p.seq_q, dtype=torch.float32, device=q.device)

        def run():
            for b in range(p.batch):
                band = bands[b] if bands else None
                kw = dict(sm_scale=p.scale, logits_soft_cap=p.softcap, backend=self.backend, return_lse=True,
                          use_fp16_qk_reduction=self.fp16_qk, kv_layout="NHD")
                if band is not None and band.kind != "empty" and self._native_ok(band, p.seq_q):
                    lo, hi = band.kv_lo, band.kv_hi
                    kw.update(causal=band.kind == "causal" or (band.kind == "window" and band.right == 0),
                              window_left=band.left if band.kind == "window" else -1)
                else:
                    lo, hi = 0, p.seq_kv
                    kw.update(custom_mask=torch.from_numpy(np.ascontiguousarray(mask[b, 0])).to(q.device, torch.bool))
                qb, kb, vb = (_readable(t[b].transpose(0, 1)) for t in (q, k[:, :, lo:hi], v[:, :, lo:hi]))  # [S][H][D]
                out_b, lse_b = self._fi.single_prefill_with_kv_cache(qb, kb, vb, **kw)
                o[b] = out_b.transpose(0, 1)
                lse[b] = lse_b.transpose(0, 1) * _LN2
        self._timed(run)
        return o, lse

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        """The flash backward's formula in float32 from FlashInfer's O and LSE (not a FlashInfer kernel)."""
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            g = p.group
            kf = k.float().repeat_interleave(g, dim=1)
            vf = v.float().repeat_interleave(g, dim=1)
            s = p.scale * (q.float() @ kf.transpose(-1, -2))
            t = None
            if p.softcap is not None:
                t = torch.tanh(s / p.softcap)
                s = p.softcap * t
            visible = torch.from_numpy(np.ascontiguousarray(p.mask)).to(q.device, torch.bool)
            s = s.masked_fill(~visible, float("-inf"))
            prob = torch.exp(s - lse.float()[..., None]).nan_to_num(0.0)  # -inf - -inf: a row with no key, no weight
            dof = d_o.float()
            dp = dof @ vf.transpose(-1, -2)
            D = (dof * o.float()).sum(-1, keepdim=True)
            ds = prob * (dp - D + d_lse.float()[..., None])
            if t is not None:
                ds = ds * (1 - t * t)

            def per_kv_head(x):
                return x.unflatten(1, (p.heads_kv, g)).sum(2)
            dq = p.scale * ds @ kf
            dk = per_kv_head(p.scale * ds.transpose(-1, -2) @ q.float())
            dv = per_kv_head(prob.transpose(-1, -2) @ dof)
            return dq, dk, dv
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
