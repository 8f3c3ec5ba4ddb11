"""The adapter base class: what a Python kernel implements to be tested by attnfuzz.

An adapter declares what the C plugin ABI's af_plugin declares (docs/plugins.md) and computes
one attention call forward (O, LSE) or backward (dQ, dK, dV), on tensors in the logical
[B][H][S][D] order ([B][H][S] for LSE and dLSE), as DESIGN.md's formulas say.
"""
import json

import numpy as np


class Problem:
    """One attention call (the C ABI's af_problem).

    batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v: the shape of this call
    dtype: "fp32", "fp16" or "bf16" (of Q, K, V, dO, O, dQ, dK, dV; LSE and dLSE are float32)
    scale: the softmax scale; softcap: None or c (S = c * tanh(S / c))
    mask_expr: the case's mask expression (dict), in full_seq_q x full_seq_kv coordinates,
      evaluated at (q + q_offset, kv + kv_offset) and and-ed with `restrictions` (bands)
    mask: the same mask materialized, numpy uint8 [B][Hq][Sq][Skv], 1 = visible
      (None in supports(), which sees the problem without tensors)
    bias_shape: None, or the extents (B|1, Hq|1, Sq|1, Skv|1) of the call's score bias (in
      supports() too); bias: None, or that bias in the case dtype, as the adapter's tensors come
      (a torch tensor on its device, or numpy), broadcast over its dimensions of extent 1:
      S = softcap(scale q.k) + bias, then the mask (None in supports())
    bias_requires_grad: True where the backward returns dBias too (Adapter.backward; in
      supports() too). Only an adapter whose envelope declares {"bias_grad": True} gets such a call.
    """

    bias_shape = None
    bias_requires_grad = False

    def __init__(self, fields: dict, mask=None, bias=None):
        self.__dict__.update(fields)
        if "mask" in fields:  # the expression given as such (tests), not as the request's text
            self._extra = {"mask": fields["mask"], "restrictions": fields.get("restrictions", [])}
        self._mask = mask  # the array, or (from the worker) a function making its kept view
        self._bias = bias  # the tensor, or (from the worker) a function making it
        if bias is not None and not callable(bias) and "bias_shape" not in fields:
            self.bias_shape = tuple(bias.shape)

    @property
    def mask(self):
        if callable(self._mask):
            self._mask = self._mask().view()  # a fresh array object, over the same memory
        return self._mask

    @mask.setter
    def mask(self, value):
        self._mask = value

    @property
    def bias(self):
        if callable(self._bias):
            self._bias = self._bias()
        return self._bias

    # The bridge sends the expression and the bands as JSON text ("extra"): parsed on first use,
    # so that adapters that read only the dense mask never pay for it.
    @property
    def mask_expr(self):
        return self._parsed_extra()["mask"]

    @property
    def restrictions(self):
        return self._parsed_extra()["restrictions"]

    @property
    def ragged(self):
        """None, or a ragged batch's lengths in the whole problem, {"lens_q": [...], "lens_kv": [...]}
        (a paged case adds "page_size", "pages" and "page_table": each sequence's physical pages):
        sequence b's mask is evaluated in its own lens_q[b] x lens_kv[b] coordinates, and nothing
        past them is visible (docs/semantics.md, "Ragged batches"). Only an adapter whose envelope
        declares {"ragged": True} gets such a call; the dense mask holds all of it."""
        return self._parsed_extra().get("ragged")

    def _parsed_extra(self):
        if "_extra" not in self.__dict__:
            self._extra = json.loads(self.extra)
        return self._extra

    @property
    def group(self):
        """Query heads per kv head (GQA): query head h reads kv head h // group."""
        return self.heads_q // self.heads_kv

    def mask_mod(self, device="cpu"):
        """The mask as a FlexAttention mask_mod in this call's coordinates (None: all visible)."""
        from .masks import mask_mod_for
        return mask_mod_for(self, device)

    def dense_mask(self, device="cpu"):
        """The harness's dense mask as a torch bool tensor [B][Hq][Sq][Skv] on `device`."""
        import torch
        return torch.from_numpy(np.ascontiguousarray(self.mask)).to(device=device, dtype=torch.bool)

    def torch_dtype(self):
        import torch
        return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[self.dtype]


class Adapter:
    """Subclass it, set the declarations, implement forward and backward.

    Tensors arrive as torch tensors (tensors = "torch") on `device`, or as numpy arrays
    (tensors = "numpy"; bf16 as ml_dtypes.bfloat16 where that package is there). They are
    zero-copy views of attnfuzz's shared memory on the CPU (on CUDA, one copy with the same
    strides): any strides, offsets and packed views the case asks for. Never write to them.
    Return results in the logical shapes; attnfuzz rounds them to the case dtype (LSE to float32).
    """

    name = "unnamed"          # the backend is called py.<name>
    version = ""
    device = "cpu"            # "cpu" or "cuda"
    tensors = "torch"         # or "numpy"
    # Numerics contract per supported dtype: fp64, fp32, tf32x3, tf32, fp16, bf16 (docs/plugins.md).
    contracts = {"fp32": "fp32"}
    backward_takes_dlse = True   # backward honours d_lse (else it gets None and attnfuzz adds the term)
    masked_rows_zero = True      # fully masked rows: O = 0, LSE = -inf, zero gradients
    returns_lse = True           # forward returns the LSE (else return None for it)
    # Outputs that may legitimately differ bitwise run to run on identical inputs, e.g.
    # ("dK", "dV") for a backward accumulating them with atomic adds: still judged against the
    # reference every run, not reported by the determinism check. Names: O, LSE, dQ, dK, dV, dBias.
    nondeterministic_outputs = ()
    why_nondeterministic = ""    # said in the report beside them
    # Whether each (batch, head) problem gives the same bits whatever else shares the call (no
    # work split, tile size or reduction order chosen by the batch size): attnfuzz then runs
    # some cases again inside a larger batch and reports any bit that moved (`batch_variant`).
    batch_invariant = False
    # Whether the batch is computed as one sequence of documents (a document mask over the packed
    # batch): a NaN or an infinity of one batch entry may then reach the others through products
    # with masked zeros (0 * NaN), and attnfuzz leaves the heads it reaches out in every entry.
    mixes_batch_entries = False
    # What campaigns aim at (docs/plugins.md, "Support envelope"; the same keys as a plugin's
    # attnfuzz_plugin_envelope()), e.g. {"max_head_dim": 256, "head_dim_multiple": 8}: a key left
    # out is unrestricted, None declares nothing. Narrowed to the dtypes of `contracts`;
    # supports() keeps the last word on every call. The exceptions, "bias" and "bias_grad": a score
    # bias reaches only an adapter that declares {"bias": True} (p.bias), and one whose gradient is
    # asked (p.bias_requires_grad) only an adapter that also declares {"bias_grad": True}; without
    # them, attnfuzz refuses every such call, whatever supports() says.
    envelope = None
    # The public function this adapter is one implementation of, when its implementations promise
    # the same numerics (e.g. "jax.nn.dot_product_attention"): passing backends of one API and one
    # contract at different precisions are a `consistency` finding. None: compared with no other.
    api = None

    def __init__(self, **options):
        """Options come from the backend name: py:MODULE:CLASS?key=value&... (strings)."""
        if options:
            raise ValueError(f"{type(self).__name__} takes no options, got {sorted(options)}")

    def supports(self, p: Problem):
        """None when this adapter can run p, else the reason (a string). p.mask and p.bias are None
        here; p.bias_shape says whether the call has a bias (one reaches only an adapter whose
        envelope declares {"bias": True}), p.bias_requires_grad whether its dBias is asked (only of
        one that declares {"bias_grad": True} too)."""
        return None

    def forward(self, p: Problem, q, k, v):
        """Returns (O [B][Hq][Sq][Dv], LSE [B][Hq][Sq] natural log, or None without returns_lse)."""
        raise NotImplementedError

    def backward(self, p: Problem, q, k, v, o, lse, d_o, d_lse):
        """Returns (dQ, dK, dV), dK and dV summed over each kv head's query heads; and where
        p.bias_requires_grad, (dQ, dK, dV, dBias): dBias shaped like p.bias, the gradient of the
        biased score (dS_ij = P_ij (dP_ij - D_i + dLSE_i), before any softcap's chain factor) summed
        over the dimensions the bias broadcasts (what autograd gives a leaf bias of p.bias's shape).
        d_lse is None unless backward_takes_dlse."""
        raise NotImplementedError

    def stats(self):
        """Numbers to add up over the run (compile seconds, say); reported by attnfuzz at exit."""
        return {}
