"""FlashAttention-4 (PyPI flash-attn-4, the CuTe-DSL kernels of flash_attn.cute) as an attnfuzz
backend, forward and backward, on Hopper (sm90) and newer.

    py:attnfuzz_py.adapters.fa4:FA4[?deterministic=false|true][&backward=autograd|explicit][&cache=memory|disk]

The public entry point flash_attn.cute.flash_attn_func(q, k, v, softmax_scale, causal,
window_size, softcap, deterministic, return_lse=True): tensors in FA's [B][S][H][D] order
(transposed views of attnfuzz's, whatever their strides: FA4 copies what its kernels cannot
read), GQA native (Hq a multiple of Hkv), the LSE [B][Hq][Sq] in natural log (its softmax
finalizes log2 sums times ln 2), fully masked rows O = 0 and LSE = -inf (its finalize's own
case). The backward: backward=autograd (default) is torch.autograd through flash_attn_func with
(dO, dLSE), the forward run again; backward=explicit calls FA4's own backward
(flash_attn.cute.interface._flash_attn_bwd, a private function) on the O and LSE the harness
hands back, as a flash backward is meant to run. dLSE is honoured either way (FA4's backward
preprocess takes rowsum(dO * O) - dLSE).

Masks: FA4 takes none, causal and sliding windows (window_size=(left, right)), aligned to the
bottom-right corner when Sq != Skv. The harness's dense mask is matched to one of those after
the keys no query sees are cut off (band_masks.py); anything else (random, document, prefix-LM,
block-sparse, a window of the other alignment that does not reduce to one, a mask that differs
between heads or batch elements) is declined with the reason. FA4 also has a CuTe-DSL mask_mod
hook for arbitrary masks; this adapter does not use it.

What FA4 4.0.0b36 takes on sm90, from its own checks (flash_attn/cute/interface.py: the head-dim
validation, the dtype asserts, the sm90 backward's GQA assert), and what this adapter declares:
fp16 and bf16 only; head dims 8 to 256 in steps of 8 (16 bytes); Dqk != Dv forward only, so with
GQA (the sm90 backward needs Dqk == Dv) it is declined; softcap (a score_mod, tanh with fastmath).

Determinism: FA4's backward adds dQ (and, with GQA, dK and dV) up in fp32 with atomics, in no
fixed order, unless deterministic=True (semaphores order the adds). deterministic=false (FA4's
default) declares dQ, dK and dV nondeterministic; deterministic=true declares nothing and is held
to bitwise repeatability.

Compile time: every new kernel (dtype, head dims, GQA group, causal/window, softcap, ...;
sequence lengths are dynamic) is compiled by cute.compile, which this adapter marks as compile
time (attnfuzz_py.compiling). cache=memory (default, FA4's own default) compiles in each process;
cache=disk turns on FA4's cache of compiled kernels on disk (FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED;
in $FLASH_ATTENTION_CUTE_DSL_CACHE_DIR, else /tmp/$USER/flash_attention_cute_dsl_cache), shared by
every worker and kept across runs: exported objects loaded back through the DSL's AOT runtime, a
younger path than FA4's in-memory one.

Where flash_attn.cute cannot be imported (this repository's CPU machines), every problem is
declined with the import error, in one line.
"""
import os
import sys

import torch

from attnfuzz_py import Adapter, compile_time
from attnfuzz_py.adapters.band_masks import Band, BandCache, band_of_mask


def _one_line(e):
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0][:300] if text else type(e).__name__


class _CompileMarked:
    """cutlass.cute.compile, its calls marked as compile time (cute.compile[options](...) too)."""

    def __init__(self, inner):
        self._inner = inner

    def __call__(self, *args, **kwargs):
        with compile_time.compiling():
            return self._inner(*args, **kwargs)

    def __getitem__(self, item):
        return _CompileMarked(self._inner[item])

    def __getattr__(self, name):
        return getattr(self._inner, name)


def import_fa4(cache):
    """(flash_attn.cute.interface, version text), or raises what the import raised."""
    if cache == "disk":
        os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")  # read when flash_attn.cute is imported
    import cutlass
    import cutlass.cute as cute
    if not isinstance(cute.compile, _CompileMarked):
        cute.compile = _CompileMarked(cute.compile)
    import flash_attn.cute.interface as fi
    from importlib import metadata
    try:
        fa_version = metadata.version("flash-attn-4")
    except metadata.PackageNotFoundError:
        fa_version = "unknown"
    return fi, f"flash-attn-4 {fa_version}, nvidia-cutlass-dsl {cutlass.__version__}"


class FA4(compile_time.CallTimes, Adapter):
    device = "cuda"
    contracts = {"fp16": "fp16", "bf16": "bf16"}
    backward_takes_dlse = True
    masked_rows_zero = True
    returns_lse = True
    api = "flash_attn.cute.flash_attn_func"
    # What campaigns aim at: what FA4's checks accept on sm90 and its sm90 kernels compile
    # (ci/thirdparty_fa4_probe.py, docs/python-backends.md). supports() has the last word: it
    # declines GQA with Dqk != Dv, and takes sliding windows outside the envelope.
    envelope = {"dtypes": ["fp16", "bf16"], "max_head_dim": 256, "head_dim_multiple": 8, "distinct_head_dims": True,
                "grouped_heads": True, "softcap": True, "masks": "causal_or_none"}

    _decline_known = True

    def __init__(self, deterministic="false", backward="autograd", cache="memory", known_bugs="decline"):
        if known_bugs not in ("decline", "run"):
            raise ValueError(f"known_bugs={known_bugs}: one of decline, run")
        # FA4-1 (docs/findings/LEDGER.md): declined unless asked for, so campaigns test the rest.
        self._decline_known = known_bugs == "decline"
        if deterministic not in ("false", "true"):
            raise ValueError(f"deterministic={deterministic}: one of false, true")
        if backward not in ("autograd", "explicit"):
            raise ValueError(f"backward={backward}: one of autograd, explicit")
        if cache not in ("memory", "disk"):
            raise ValueError(f"cache={cache}: one of memory, disk")
        self.deterministic = deterministic == "true"
        self.explicit = backward == "explicit"
        self.name = ("fa4" + (".deterministic" if self.deterministic else "") + (".explicit_bwd" if self.explicit else "")
                     + ("" if self._decline_known else ".known_bugs"))
        if not self.deterministic:
            self.nondeterministic_outputs = ("dQ", "dK", "dV")
            self.why_nondeterministic = ("FA4's backward adds dQ (and with GQA dK, dV) up with fp32 atomics in no fixed order "
                                         "unless deterministic=True")
        self._why_not = None
        self._fi = None
        self._bands = BandCache()
        compile_time.CallTimes.__init__(self)
        try:
            self._fi, lib = import_fa4(cache)
        except Exception as e:  # noqa: BLE001 - any import failure (missing wheel, missing CUDA library) declines
            self._why_not = f"FlashAttention-4 (flash_attn.cute) is not importable in this Python: {_one_line(e)}"
            self.version = "flash-attn-4 missing"
            return
        cc = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        if cc is None:
            self._why_not = "FlashAttention-4 needs a CUDA device; none is visible to this Python"
        elif cc[0] < 9:
            self._why_not = f"FlashAttention-4's backward needs sm90 or newer; this GPU is sm{cc[0]}{cc[1]}"
        self.version = (lib + (f", sm{cc[0]}{cc[1]}" if cc else "") + (", deterministic" if self.deterministic else "")
                        + (", explicit backward (_flash_attn_bwd)" if self.explicit else ", backward through autograd")
                        + f", kernel cache {cache}")

    def supports(self, p):
        if self._why_not:
            return self._why_not
        if p.dtype not in ("fp16", "bf16"):
            return "FA4 takes fp16 and bf16 only"
        for what, d in (("Dqk", p.head_dim_qk), ("Dv", p.head_dim_v)):
            if not 8 <= d <= 256 or d % 8:
                return f"FA4 on sm90 needs head dims from 8 to 256 in steps of 8, got {what}={d}"
        if p.group > 1 and p.head_dim_qk != p.head_dim_v:
            return "FA4's sm90 backward with GQA needs Dqk == Dv"
        # FA4-1, confirmed on the H200 by docs/findings/standalone/fa4_sm90_head_dims.py: at head
        # dims that are not multiples of 32 (8, 16, 48) the sm90 backward returns dQ of relative
        # error about 1, and with GQA dK and dV too; forward, LSE and MHA's dK, dV are correct. The
        # dQ part is Dao-AILab/flash-attention#2896 (open: dq_accum padded to 32, the kernel's tile to 16).
        if self._decline_known and (p.head_dim_qk % 32 or (p.group > 1 and p.head_dim_v % 32)):
            return ("FA4 4.0.0b36's sm90 backward is wrong at head dims that are not multiples of 32 "
                    "(FA4-1, flash-attention#2896; known_bugs=run runs them)")
        band, why = self._bands.band(p)
        if why:
            return f"FA4 takes none, causal or sliding-window masks: {why}"
        if band.kind == "window" and ((band.left is not None and band.left < 0) or (band.right is not None and band.right < 0)):
            return f"FA4's windows take left, right >= 0; this mask is {band.describe()}"
        return None

    def _band(self, p):
        bands, why = band_of_mask(p.mask)
        if why:  # supports() read the expression; the dense mask disagrees: the bridge's fault
            raise RuntimeError(f"attnfuzz_py: the dense mask is no band although its expression is ({why}): a bridge bug")
        return bands[0] if bands else Band(0, 0, None, None)  # B = 0


    def _kwargs(self, p, band):
        causal = band.kind == "causal"
        window = (band.left, band.right) if band.kind == "window" else (None, None)
        return dict(softmax_scale=p.scale, causal=causal, window_size=window, softcap=p.softcap or 0.0,
                    deterministic=self.deterministic, return_lse=True)

    def forward(self, p, q, k, v):
        band = self._band(p)
        lo, hi = band.kv_lo, band.kv_hi
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k[:, :, lo:hi], v[:, :, lo:hi]))  # [B][S][H][D] views
        with torch.no_grad():
            out, lse = self._timed(lambda: self._fi.flash_attn_func(qt, kt, vt, **self._kwargs(p, band)))
        return out.transpose(1, 2), lse

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        band = self._band(p)
        lo, hi = band.kv_lo, band.kv_hi
        kw = self._kwargs(p, band)
        if self.explicit:
            qt, kt, vt, ot, dot = (t.transpose(1, 2) for t in (q, k[:, :, lo:hi], v[:, :, lo:hi], o, d_o))
            left, right = kw["window_size"]
            dq, dk_part, dv_part = self._timed(lambda: self._fi._flash_attn_bwd(
                qt, kt, vt, ot, dot, lse.contiguous(), p.scale, kw["causal"], kw["softcap"], window_size_left=left,
                window_size_right=right, deterministic=self.deterministic, dlse=d_lse.contiguous())[:3])
        else:
            qt, kt, vt = (t.transpose(1, 2).detach().requires_grad_() for t in (q, k[:, :, lo:hi], v[:, :, lo:hi]))

            def run():
                out, out_lse = self._fi.flash_attn_func(qt, kt, vt, **kw)
                return torch.autograd.grad([out, out_lse], [qt, kt, vt], [d_o.transpose(1, 2).to(out.dtype), d_lse],
                                           allow_unused=True)
            dq, dk_part, dv_part = self._timed(run)
        dq = torch.zeros_like(q.transpose(1, 2)) if dq is None else dq
        dk = torch.zeros(k.shape, dtype=k.dtype, device=k.device)  # keys no query sees: exact zeros
        dv = torch.zeros(v.shape, dtype=v.dtype, device=v.device)
        if hi > lo and dk_part is not None:
            dk[:, :, lo:hi] = dk_part.transpose(1, 2)
            dv[:, :, lo:hi] = dv_part.transpose(1, 2)
        return dq.transpose(1, 2), dk, dv
