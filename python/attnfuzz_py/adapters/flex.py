"""FlexAttention (torch.nn.attention.flex_attention) as attnfuzz backends: eager and compiled.

    py:attnfuzz_py.adapters.flex:FlexEager[?device=cuda][&matmul_precision=highest|high]
    py:attnfuzz_py.adapters.flex:FlexCompiled[?device=cuda][&matmul_precision=highest|high]

The case's mask expression becomes a mask_mod (attnfuzz_py.masks) and a BlockMask; a softcap
and a score bias become a score_mod (the bias a captured tensor, looked up at the call's indices,
at 0 along its broadcast dimensions); GQA uses enable_gqa; the LSE comes from return_aux=AuxRequest(lse=True).
The backward is autograd through flex_attention with grad_outputs (dO, dLSE): the gradient
that flows into the LSE is exactly what the FlexAttention seed bug mishandled.

dBias: where the call asks for it, the captured bias is a leaf of the bias's broadcast shape
that requires grad, and flex_attention's backward returns the gradient of that captured tensor
(FlexAttention's "learnable biases"): eager's dense backward differentiates the score_mod (run on
the CPU here: tests/python/test_dbias_adapters.py), Inductor's compiled backward writes the
captured tensors' gradients with an atomic-add scatter (torch/_inductor/kernel/flex/common.py,
torch 2.11; NOT YET RUN on a GPU). Each score element adds once, so a dense bias's gradient is
exact and repeatable (FlexCompiled's bucketed bias is dense over the padded problem); a bias
looked up at 0 along a broadcast dimension (FlexCompiled shapes=static) sums many adds in the
order the GPU's threads come, so there dBias is declared nondeterministic.

On the CPU (torch 2.11): flex_attention refuses inputs that require grad ("does not support
backward on CPU"), but its eager implementation has a device-generic dense backward, the same
one CUDA eager runs. FlexEager lifts that one guard for its backward (and says so in its
version string). torch.compile(flex_attention) on the CPU runs inference only and returns no
LSE, so FlexCompiled declines the CPU with that reason.

Recompiles: torch.compile specializes on every new shape, dtype, scale and mask, and after its
recompile limit (8) silently falls back to eager. FlexCompiled (shapes=bucketed, the default)
pads heads and head dims to a few buckets, compiles the forward with dynamic B and S and pads
them for the backward (flex_buckets.py), so a campaign compiles each of a few kernels once; it also raises the limits to 2^20, makes hitting
a limit an error (fail_on_recompile_limit_hit), compiles with fullgraph=True (a graph break is
an error), and watches every call for FlexAttention's "called without torch.compile()" warning:
a fallback is reported as an error of the call, never tested as "compiled". Compile time
(attnfuzz_py.compile_time, from dynamo's compile callbacks) is counted apart from run time, in
stats(), and the watchdogs do not count it. shapes=static: each shape compiled for itself.

fp32: both declare the "fp32" contract. matmul_precision sets torch.set_float32_matmul_precision
in the adapter's process before anything compiles: "highest" (the default, torch's own) keeps
fp32 products; "high", the setting many training scripts make, lets Inductor's FlexAttention
kernels run their fp32 dots as TF32 (FLOAT32_PRECISION 'tf32', torch 2.11's
get_float32_precision). That is fp32 silently run on tensor cores, the first half of the
FlexAttention seed report, and the harness reports it as a contract_violation
(docs/python-backends.md, "The seeds on the H200").
"""
import contextlib
import sys
import time
import warnings

import torch
import torch.nn.attention.flex_attention as fa

from attnfuzz_py import Adapter, watch_torch_compile
from attnfuzz_py.adapters import flex_buckets
from attnfuzz_py.compile_time import totals as compile_totals
from attnfuzz_py.masks import contains_random, dense_from_mask_mod

_EAGER_WARNING = "flex_attention called without torch.compile"
_SELF_CHECK_LIMIT = 1 << 22  # mask elements up to which the mask_mod is checked against the dense mask


@contextlib.contextmanager
def _cpu_backward_allowed():
    """Lifts flex_attention's "no backward on CPU" guard, and nothing else it checks."""
    original = fa._validate_device

    def validate(query, key, value):
        if query.device.type != "cpu":
            original(query, key, value)
    fa._validate_device = validate
    try:
        yield
    finally:
        fa._validate_device = original


def bias_lookup(bias, device):
    """The score bias (p.bias, or a leaf of it that requires grad) as a function (b, h, q_idx,
    kv_idx) -> its fp32 value, for a score_mod: the captured tensor indexed at 0 along its
    dimensions of extent 1 (broadcast). None where the call has no bias."""
    if bias is None:
        return None
    bias = bias.to(device=device, dtype=torch.float32)  # exact: its values are the case dtype's; differentiable
    nb, nh, nq, nkv = bias.shape

    def lookup(b, h, q_idx, kv_idx):
        return bias[b if nb > 1 else 0, h if nh > 1 else 0, q_idx if nq > 1 else 0, kv_idx if nkv > 1 else 0]
    return lookup


class FlexEager(Adapter):
    name = "flex_eager"
    api = "torch.nn.attention.flex_attention"  # eager and compiled: one function, one numerics
    contracts = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}
    envelope = {"bias": True, "bias_grad": True}  # in the score_mod; dBias as the captured tensor's gradient
    backward_takes_dlse = True
    masked_rows_zero = True

    def __init__(self, device=None, matmul_precision="highest"):
        if matmul_precision not in ("highest", "high"):
            raise ValueError(f"matmul_precision={matmul_precision}: one of highest, high")
        torch.set_float32_matmul_precision(matmul_precision)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.name = type(self).name + (".cuda" if self.device == "cuda" else "") + (".tf32" if matmul_precision == "high" else "")
        self.version = (f"torch {torch.__version__}" + (", eager dense backward on CPU" if self.device == "cpu" else "") +
                        (", float32 matmul precision high" if matmul_precision == "high" else ""))
        self._fn = fa.flex_attention

    def supports(self, p):
        if self.device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device visible to this Python"
        if min(p.seq_q, p.seq_kv, p.batch) == 0:
            return "FlexAttention needs at least one query and one key"
        return None

    def _block_mask(self, p):
        mask_mod = p.mask_mod(self.device)
        if p.mask is not None and p.mask.size <= _SELF_CHECK_LIMIT:
            got = dense_from_mask_mod(mask_mod, p.batch, p.heads_q, p.seq_q, p.seq_kv, self.device).cpu().numpy()
            if (got != p.mask.astype(bool)).any():
                raise RuntimeError("attnfuzz_py.masks: the mask_mod disagrees with the harness's dense mask (a bridge bug)")
        if mask_mod is None:
            return None
        per_head = contains_random(p.mask_expr)
        return fa.create_block_mask(mask_mod, p.batch if per_head else None, p.heads_q if per_head else None,
                                    p.seq_q, p.seq_kv, device=self.device)

    def _attend(self, p, q, k, v, bias=None, block_mask=None):
        """O and LSE; bias: the score bias to capture (a leaf that requires grad), else p.bias;
        block_mask: the call's BlockMask, else the one of p's mask."""
        score_mod = None
        bias = bias_lookup(p.bias if bias is None else bias, self.device)
        if p.softcap is not None:
            # c as a tensor, not a Python float: eager flex_attention's backward goes through an
            # internal torch.compile, which fails (PendingUnbackedSymbolNotFound) once a captured
            # float changes between calls (torch 2.11; docs/findings, standalone script). The
            # product is the same fp32 one: the scores are fp32 in either case.
            c = torch.tensor(p.softcap, dtype=torch.float32, device=self.device)

            def score_mod(score, b, h, q_idx, kv_idx):
                capped = c * torch.tanh(score / c)
                return capped if bias is None else capped + bias(b, h, q_idx, kv_idx)  # the bias after the softcap
        elif bias is not None:
            def score_mod(score, b, h, q_idx, kv_idx):
                return score + bias(b, h, q_idx, kv_idx)
        block_mask = self._block_mask(p) if block_mask is None else block_mask
        out, aux = self._call(self._fn, q, k, v, score_mod=score_mod, block_mask=block_mask, scale=p.scale,
                              enable_gqa=p.group > 1, return_aux=fa.AuxRequest(lse=True))
        return out, aux.lse

    def _call(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def forward(self, p, q, k, v):
        with torch.no_grad():
            return self._attend(p, q, k, v)

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        inputs = [q, k, v]
        bias = None
        if p.bias_requires_grad:  # a leaf of the bias's own (broadcast) shape: its gradient is dBias
            bias = p.bias.detach().requires_grad_()
            inputs.append(bias)
        guard = _cpu_backward_allowed() if self.device == "cpu" else contextlib.nullcontext()
        with guard:
            out, out_lse = self._attend(p, q, k, v, bias)
        return self._grad([out, out_lse], inputs, [d_o.to(out.dtype), d_lse.to(out_lse.dtype)])

    def _grad(self, outputs, inputs, grads):
        return torch.autograd.grad(outputs, inputs, grads, allow_unused=True)


def _raise_compile_limits():
    cfg = torch._dynamo.config
    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, knob):
            setattr(cfg, knob, 1 << 20)
    if hasattr(cfg, "fail_on_recompile_limit_hit"):
        cfg.fail_on_recompile_limit_hit = True


_SHAPES = ("bucketed", "static")


class FlexCompiled(FlexEager):
    """torch.compile(flex_attention). shapes=bucketed (default): heads and head dims padded to a
    few buckets, the forward with dynamic B and S, the backward with B and S padded to buckets
    too (flex_buckets.py), so a campaign compiles each kernel once; shapes=static: the call as it
    is, the mask as its expression, one compile per new shape, scale and mask."""
    name = "flex_compiled"

    def __init__(self, device=None, shapes="bucketed", matmul_precision="highest"):
        super().__init__(device, matmul_precision)
        if shapes not in _SHAPES:
            raise ValueError(f"shapes={shapes}: one of {', '.join(_SHAPES)}")
        self.shapes = shapes
        self.version = (self.version + ", torch.compile(fullgraph, "
                        + ("bucketed heads and head dims; forward: dynamic B and S; backward: bucketed B and S"
                           if shapes == "bucketed" else "static shapes") + ", recompile limit 2^20)")
        _raise_compile_limits()
        self._fn = torch.compile(fa.flex_attention, fullgraph=True, dynamic=False)
        self._fn_forward = self._fn
        if shapes == "bucketed":  # the forward with symbolic B, S; a size of 1 is not a shape of its own
            import torch.fx.experimental._config as fx_config
            fx_config.backed_size_oblivious = True
            self._fn_forward = torch.compile(fa.flex_attention, fullgraph=True, dynamic=True)
        if shapes == "static":  # the bias's broadcast lookup: its gradient in atomic adds (the module's docstring)
            self.nondeterministic_outputs = ("dBias",)
            self.why_nondeterministic = ("Inductor's flex backward adds a captured bias's gradient with atomic adds; a bias "
                                         "broadcast over a dimension gets many adds per element (torch 2.11)")
        watch_torch_compile()
        self._stats = {"compile_s": 0.0, "run_s": 0.0, "compiles": 0, "fallbacks": 0}  # since the last reply
        self._totals = {"compile_s": 0.0, "compiles": 0, "run_s": 0.0, "calls": 0}  # since the start
        self._fallbacks = 0

    def supports(self, p):
        if self.device == "cpu":
            return "torch.compile(flex_attention) on CPU runs inference only, without LSE (torch 2.11): use device=cuda"
        dqk, dv = flex_buckets.bucket(p.head_dim_qk, 16), flex_buckets.bucket(p.head_dim_v, 16)
        if p.dtype != "fp32" and (dqk, dv) == (128, 256):
            # Measured twice on the H200 (torch 2.11): the flex backward for Dqk=128, Dv=256 in bf16
            # has no config that fits the shared memory ("out of resource: Required 246784,
            # Hardware limit 232448"); (16, 256), (64, 256), (256, 256), (256, 128) compile. The
            # kernel rounds head dims up to powers of two, so this is by the rounded dims.
            return ("torch.compile(flex_attention): no backward kernel fits the GPU's shared memory for head dims rounded to "
                    "Dqk=128, Dv=256 in 16-bit (torch 2.11, H200)")
        if p.dtype != "fp32" and (dqk, dv) == (64, 256) and p.group > 1:
            # docs/findings P-4, measured on the H200 (torch 2.11, standalone/
            # flex_compiled_mixed_head_dims_smem.py): with GQA the flex forward for Dqk=64 and Dv=192
            # or 256 in bf16 has no config that fits ("Required 262144, Hardware limit 232448");
            # Dv=128 compiles.
            return ("torch.compile(flex_attention): no forward kernel fits the GPU's shared memory for GQA with head dims "
                    "rounded to Dqk=64, Dv=256 in 16-bit (torch 2.11, H200; docs/findings P-4)")
        if self.shapes == "static" and min(p.head_dim_qk, p.head_dim_v) < 16:
            # Inductor's lowering refuses them (torch 2.11: "NYI: embedding dimension of the
            # query, key, and value must be at least 16"); eager FlexAttention takes them.
            return "torch.compile(flex_attention) needs head dims of at least 16 (torch 2.11 Inductor)"
        return super().supports(p)

    def _timed(self, fn):
        """Runs fn with the eager-fallback warning watched; compile time (compile_time's count
        of torch.compile's compiles) goes to compile_s, the rest to run_s."""
        # FlexAttention warns once per process; forget that it did, so every eager run shows.
        getattr(fa, "_WARNINGS_SHOWN", set()).discard("flex_attention_performance")
        c0, n0 = compile_totals()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            out = fn()
            if self.device == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        if any(_EAGER_WARNING in str(w.message) for w in caught):
            self._stats["fallbacks"] += 1
            self._fallbacks += 1
            print(f"py.{self.name}: FELL BACK TO EAGER (fallbacks={self._fallbacks})", file=sys.stderr, flush=True)
            raise RuntimeError("torch.compile(flex_attention) fell back to eager: this call did not test the compiled kernel")
        c1, n1 = compile_totals()
        for k, x in (("compile_s", c1 - c0), ("compiles", n1 - n0), ("run_s", max(0.0, dt - (c1 - c0)))):
            self._stats[k] += x
            self._totals[k] += x
        self._totals["calls"] += 1
        if n1 > n0:  # a campaign's workers are killed at its end, before the backend prints its stats: a line per compile
            t = self._totals
            print(f"py.{self.name}: compiled ({c1 - c0:.1f} s); so far compile_s={t['compile_s']:.1f} compiles={t['compiles']} "
                  f"run_s={t['run_s']:.1f} calls={t['calls']} fallbacks={self._fallbacks}", file=sys.stderr, flush=True)
        return out

    def _call(self, fn, *args, **kwargs):
        return self._timed(lambda: fn(*args, **kwargs))

    def _grad(self, outputs, inputs, grads):
        # The backward graph is compiled on the first backward of each forward graph.
        return self._timed(lambda: torch.autograd.grad(outputs, inputs, grads, allow_unused=True))

    def forward(self, p, q, k, v):
        if self.shapes == "static":
            return super().forward(p, q, k, v)
        with torch.no_grad():
            return flex_buckets.forward(lambda *a, **kw: self._call(self._fn_forward, *a, **kw), p, q, k, v, self.device)

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        if self.shapes == "static":
            return super().backward(p, q, k, v, o, lse, d_o, d_lse)
        return flex_buckets.backward(lambda *a, **kw: self._call(self._fn, *a, **kw), self._grad, p, q, k, v, d_o, d_lse,
                                     self.device)

    def stats(self):
        out, self._stats = self._stats, {"compile_s": 0.0, "run_s": 0.0, "compiles": 0, "fallbacks": 0}
        return out


def call_lengths(p):
    """Each sequence's query and key counts in this call (a composition's call covers rows
    [q_offset, q_offset + Sq) and keys [kv_offset, kv_offset + Skv), and a sequence's rows are a
    prefix of its padded rows): a dense batch is every length full."""
    ragged = p.ragged
    if not ragged:
        return [p.seq_q] * p.batch, [p.seq_kv] * p.batch

    def clamp(lens, offset, n):
        return [min(max(length - offset, 0), n) for length in lens]
    return clamp(ragged["lens_q"], p.q_offset, p.seq_q), clamp(ragged["lens_kv"], p.kv_offset, p.seq_kv)


class FlexDocument(FlexEager):
    """A batch as FlexAttention's document masking, the way packed training calls it: every
    sequence's rows packed into one batch row (Tq = sum of the query lengths, Tkv of the key
    lengths), and a mask_mod that lets packed query t see packed key u only inside one document,
    where the case's mask lets that sequence's query see that key (looked up in the harness's
    dense mask at the sequence's own indices). Takes ragged batches and dense ones (every length
    full); the packing is autograd's, so the backward's gradients land back in the padded rows.

        py:attnfuzz_py.adapters.flex:FlexDocument[?device=cuda]
        py:attnfuzz_py.adapters.flex:FlexDocumentCompiled[?device=cuda]   (torch.compile, static shapes)
    """
    name = "flex_document"
    envelope = {"ragged": True}
    # The batch is one packed sequence: eager flex's P^T dO runs over every document's rows, so a
    # NaN in one sequence's dO meets the others' masked zeros (0 * NaN) in their dV.
    mixes_batch_entries = True

    def supports(self, p):
        if p.bias_shape is not None:
            return "flex_document takes no score bias"
        if p.batch == 0 or min(p.seq_q, p.seq_kv) == 0:
            return "FlexAttention needs at least one query and one key"
        return super().supports(p)

    @staticmethod
    def _documents(lens, device):
        """Each packed row's sequence and its index inside it."""
        lens = torch.tensor(lens, dtype=torch.int64)
        doc = torch.repeat_interleave(torch.arange(lens.numel()), lens)
        local = torch.arange(doc.numel()) - (torch.cumsum(lens, 0) - lens)[doc]
        return doc.to(device), local.to(device)

    def _document_block_mask(self, p, doc_q, doc_kv, local_q, local_kv):
        dense = p.dense_mask(self.device)

        def mask_mod(b, h, q_idx, kv_idx):
            same = doc_q[q_idx] == doc_kv[kv_idx]
            return same & dense[doc_q[q_idx], h, local_q[q_idx], local_kv[kv_idx]]
        return fa.create_block_mask(mask_mod, None, p.heads_q, doc_q.numel(), doc_kv.numel(), device=self.device)

    @staticmethod
    def _pack(t, lens):
        """[B, H, S, D] (or [B, H, S]) -> [1, H, sum(lens), ...]: each sequence's first rows."""
        return torch.cat([t[b, :, :n] for b, n in enumerate(lens)], dim=1).unsqueeze(0)

    def _attend_packed(self, p, q, k, v):
        lq, lkv = call_lengths(p)
        if sum(lq) == 0 or sum(lkv) == 0:
            return None, lq
        doc_q, local_q = self._documents(lq, q.device)
        doc_kv, local_kv = self._documents(lkv, q.device)
        block_mask = self._document_block_mask(p, doc_q, doc_kv, local_q, local_kv)
        return self._attend(p, self._pack(q, lq), self._pack(k, lkv), self._pack(v, lkv), block_mask=block_mask), lq

    def forward(self, p, q, k, v):
        with torch.no_grad():
            packed, lq = self._attend_packed(p, q, k, v)
        o = torch.zeros(p.batch, p.heads_q, p.seq_q, p.head_dim_v, dtype=q.dtype, device=q.device)
        lse = torch.full((p.batch, p.heads_q, p.seq_q), -float("inf"), dtype=torch.float32, device=q.device)
        if packed is None:  # no query or no key anywhere: every row is fully masked
            return o, lse
        out, out_lse = packed
        at = 0
        for b, n in enumerate(lq):
            o[b, :, :n] = out[0, :, at:at + n]
            lse[b, :, :n] = out_lse[0, :, at:at + n]
            at += n
        return o, lse

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        guard = _cpu_backward_allowed() if self.device == "cpu" else contextlib.nullcontext()
        with guard:
            packed, lq = self._attend_packed(p, q, k, v)
        if packed is None:
            return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        out, out_lse = packed
        grads = [self._pack(d_o, lq).to(out.dtype), self._pack(d_lse, lq).to(out_lse.dtype)]
        dq, dk, dv = self._grad([out, out_lse], [q, k, v], grads)[:3]
        return tuple(torch.zeros_like(x) if g is None else g for x, g in zip((q, k, v), (dq, dk, dv)))


class FlexDocumentCompiled(FlexDocument, FlexCompiled):
    """FlexDocument through torch.compile(flex_attention), static shapes (each packed length and
    mask compiled for itself: the document lookup tables are captured tensors)."""
    name = "flex_document_compiled"

    def __init__(self, device=None, matmul_precision="highest"):
        FlexCompiled.__init__(self, device, "static", matmul_precision)


class FlexPaged(FlexDocument):
    """FlexAttention's paged KV cache (torch.nn.attention.experimental._paged_attention,
    PagedAttention, torch 2.11), the way a serving loop calls it: K and V live in one physical
    cache [1, Hkv, pages * page_size, D] shared by the batch, each sequence's keys in the pages its
    page table names, and the logical BlockMask (key blocks of page_size) converted to the
    physical one by PagedAttention.convert_logical_block_mask, whose mask_mod maps each physical
    key back to its sequence's logical key and hides keys past kv_len. Queries stay dense
    [B, Hq, Sq, D] (rows past a sequence's length are masked, hence O = 0 and LSE = -inf).

    The pages are the case's (ragged.page_size and the table the harness sends, the one
    cudnn.paged uses); a ragged case without pages gets page_size 16, pages in order. A key
    position the table does not use (a page's rows past its sequence, the spare page) holds the
    finite poison 1000: a masked key must add nothing, but 0 * NaN would be NaN in any kernel
    that multiplies P by V over the whole page (eager FlexAttention does), so NaN would test
    the mask's arithmetic, not its reach. A composition's call reads its keys through the whole
    problem's pages (its keys start at kv_offset in each sequence).

    Paged FlexAttention is inference: the backward is FlexDocument's (the packed documents), as
    cudnn.paged's backward is cudnn.varlen's.

        py:attnfuzz_py.adapters.flex:FlexPaged[?device=cuda]
        py:attnfuzz_py.adapters.flex:FlexPagedCompiled[?device=cuda]   (torch.compile, static shapes)
    """
    name = "flex_paged"
    default_page_size = 16
    poison = 1000.0

    def _pages(self, p):
        """(page_size, physical page count, table [B][pages of the sequence]) of the whole problem."""
        r = p.ragged or {}
        lens_kv = r.get("lens_kv", [p.full_seq_kv] * p.batch)
        if r.get("page_size"):
            return r["page_size"], r["pages"], r["page_table"]
        size = self.default_page_size
        table, at = [], 0
        for n in lens_kv:
            count = -(-n // size)
            table.append(list(range(at, at + count)))
            at += count
        return size, at + 1, table

    @staticmethod
    def _map_pages(paged, table):
        """The case's table as PagedAttention's own (instead of its allocator's order)."""
        for b, row in enumerate(table):
            for logical, physical in enumerate(row):
                paged.page_table[b, logical] = physical
                paged.physical_to_logical[b, physical] = logical

    def _paged_attend(self, p, q, k, v):
        from torch.nn.attention.experimental._paged_attention import PagedAttention
        dev = q.device
        lq, lkv = call_lengths(p)
        size, pages, table = self._pages(p)
        paged = PagedAttention(pages, size, p.batch, device=dev)
        self._map_pages(paged, table)
        rows_at, src_b, src_j = [], [], []
        for b, row in enumerate(table):
            j = torch.arange(lkv[b], dtype=torch.int64)
            whole = p.kv_offset + j  # the call's key j is key p.kv_offset + j of its sequence
            rows_at.append(torch.tensor(row, dtype=torch.int64)[whole // size] * size + whole % size if lkv[b] else j)
            src_b.append(torch.full_like(j, b))
            src_j.append(j)
        cache_k = torch.full((1, p.heads_kv, pages * size, p.head_dim_qk), self.poison, dtype=k.dtype, device=dev)
        cache_v = torch.full((1, p.heads_kv, pages * size, p.head_dim_v), self.poison, dtype=v.dtype, device=dev)
        at, sb, sj = (torch.cat(x).to(dev) for x in (rows_at, src_b, src_j))
        cache_k[0, :, at] = k[sb, :, sj].transpose(0, 1)
        cache_v[0, :, at] = v[sb, :, sj].transpose(0, 1)

        dense = p.dense_mask(dev)
        lq_t = torch.tensor(lq, dtype=torch.int64, device=dev)
        lkv_t = torch.tensor(lkv, dtype=torch.int64, device=dev)
        kv_end = torch.tensor([p.kv_offset + n for n in lkv], dtype=torch.int64, device=dev)
        offset, last_q, last_kv = p.kv_offset, max(p.seq_q - 1, 0), max(p.seq_kv - 1, 0)

        def mask_mod(b, h, q_idx, kv_idx):  # kv_idx: the sequence's logical key in the whole problem
            call_kv = kv_idx - offset
            inside = (q_idx < lq_t[b]) & (call_kv >= 0) & (call_kv < lkv_t[b])
            return inside & dense[b, h, q_idx.clamp(0, last_q), call_kv.clamp(0, last_kv)]
        logical_len = max(len(row) for row in table) * size if table else size
        logical = fa.create_block_mask(mask_mod, p.batch, p.heads_q, p.seq_q, max(logical_len, size), device=dev,
                                       BLOCK_SIZE=(128, size))
        physical = paged.convert_logical_block_mask(logical, kv_len=kv_end)
        # Rows past a sequence's queries are masked whole; their (poisoned) values must not matter.
        q = q * (torch.arange(p.seq_q, device=dev)[None, None, :, None] < lq_t[:, None, None, None])
        score_mod = None
        if p.softcap is not None:  # a function of the score alone: no key index to map
            c = torch.tensor(p.softcap, dtype=torch.float32, device=dev)

            def score_mod(score, b, h, q_idx, kv_idx):
                return c * torch.tanh(score / c)
        out, aux = self._call(self._fn, q, cache_k, cache_v, score_mod=score_mod, block_mask=physical, scale=p.scale,
                              enable_gqa=p.group > 1, return_aux=fa.AuxRequest(lse=True))
        return out, aux.lse

    def forward(self, p, q, k, v):
        lq, lkv = call_lengths(p)
        if sum(lq) == 0 or sum(lkv) == 0:
            return super().forward(p, q, k, v)  # nothing visible anywhere: every row O = 0, LSE = -inf
        with torch.no_grad():
            out, lse = self._paged_attend(p, q, k, v)
        return out.to(q.dtype), lse.float()


class FlexPagedCompiled(FlexPaged, FlexCompiled):
    """FlexPaged through torch.compile(flex_attention), static shapes: the compiled kernel reads
    K and V through the converted BlockMask's physical key blocks (a page each)."""
    name = "flex_paged_compiled"

    def __init__(self, device=None, matmul_precision="highest"):
        FlexCompiled.__init__(self, device, "static", matmul_precision)

    def supports(self, p):
        size = self._pages(p)[0]
        if size % 128:
            # Inductor's flex kernel (torch 2.11, _inductor/kernel/flex/flex_attention.py) skips every
            # config whose BLOCK_N (up to 128) does not divide the key block, and the block is a page;
            # only the decoding kernel (short queries, no per-head mask under GQA) shrinks BLOCK_N to it.
            return f"torch.compile(flex_attention) needs pages whose rows its BLOCK_N divides (a multiple of 128 here), not {size}"
        return super().supports(p)
