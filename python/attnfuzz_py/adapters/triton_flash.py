"""A small flash-attention kernel in Triton, forward and backward: the worked example of
"bring your own Triton kernel" (docs/python-backends.md).

    py:attnfuzz_py.adapters.triton_flash:TritonFlash                  (CUDA)
    py:attnfuzz_py.adapters.triton_flash:TritonFlash?device=cpu       (Triton's interpreter, for tests)

Forward: one program per (query block, batch and query head); online softmax over key blocks,
O and the natural-log LSE out. Backward: D = rowsum(dO * O) first, then one program per (key
block, batch and kv head) for dK, dV (looping over the query heads of its group: GQA without
atomics) and one per (query block, batch and query head) for dQ, with P recomputed from the LSE
it is given and dS = P * (dP - D + dLSE). Every tensor is read and written through its strides.
The mask is read from the dense mask attnfuzz sends (the simplest correct choice). Fully masked
rows give O = 0, LSE = -inf and no gradient. fp32 runs its dots in IEEE fp32 (Triton's default
for fp32 would be TF32: declare "tf32" if you keep it); fp16/bf16 round P and dS to the input
type before their dots, as the contract says. No softcap.

Compile time is not run time: Triton compiles a kernel at its first launch with each new
specialization, for seconds. The kernels here specialize on their constexprs alone (dtype, tile
sizes, the power-of-two head-dim blocks: triton_flash_kernels._jit_unspecialized), not on the
values of sizes, strides and pointers, so a campaign compiles a few kernels per worker.
watch_triton_compile() makes those compiles count as compile time (the watchdogs wait), and
stats() reports compile_s, compiles and run_s apart, like FlexCompiled's.
"""
import importlib
import os
import sys

import torch

from attnfuzz_py import Adapter, compile_time


# The module holding the @triton.jit kernels. In your copy of this adapter: your kernels' module
# (docs/python-backends.md, "Bring your own Triton kernel").
KERNELS = "attnfuzz_py.adapters.triton_flash_kernels"


def _import_triton(interpret):
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # read when triton is imported
    import triton
    return triton


def _block(d):
    return max(16, 1 << (int(d) - 1).bit_length())


class TritonFlash(compile_time.CallTimes, Adapter):
    contracts = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}
    backward_takes_dlse = True
    masked_rows_zero = True
    envelope = {"softcap": False}  # what campaigns aim at: supports() declines a softcap
    BM = BN = 32

    def __init__(self, device="cuda"):
        self.device = device
        self.name = "triton_flash" + (".interpreted" if device == "cpu" else "")
        if device == "cpu":  # Triton 3.6's interpreter computes garbage from bf16 tensors (numpy has no bf16)
            self.contracts = {"fp32": "fp32", "fp16": "fp16"}
        self._why_not = None
        try:
            self._triton = _import_triton(interpret=device == "cpu")
        except ImportError as e:
            self._why_not, self.version = f"Triton is not installed in this Python ({e})", "triton missing"
        else:
            k = importlib.import_module(KERNELS)  # an error in the kernels' module stops the start-up, with its traceback
            self.version = f"triton {self._triton.__version__}" + (" (interpreter)" if device == "cpu" else "")
            self._fwd, self._bwd_kv, self._bwd_q = k._fwd, k._bwd_kv, k._bwd_q
            if device != "cpu":  # the interpreter compiles nothing
                compile_time.watch_triton_compile()
        compile_time.CallTimes.__init__(self)


    def supports(self, p):
        if self._why_not:
            return self._why_not
        if self.device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device visible to this Python (device=cpu runs Triton's interpreter)"
        if p.softcap is not None:
            return "this example kernel has no softcap"
        if min(p.seq_q, p.seq_kv, p.batch) == 0:
            return "empty call"
        return None

    def _common(self, p, q):
        mask = torch.from_numpy(p.mask).to(self.device)  # contiguous uint8 [B][Hq][Sq][Skv]
        consts = dict(DQK=p.head_dim_qk, DV=p.head_dim_v, BM=self.BM, BN=self.BN, BDQK=_block(p.head_dim_qk),
                      BDV=_block(p.head_dim_v), IEEE=p.dtype == "fp32")
        return mask, consts

    def forward(self, p, q, k, v):
        mask, c = self._common(p, q)
        o = torch.empty(p.batch, p.heads_q, p.seq_q, p.head_dim_v, dtype=q.dtype, device=self.device)
        lse = torch.empty(p.batch, p.heads_q, p.seq_q, dtype=torch.float32, device=self.device)
        grid = (self._triton.cdiv(p.seq_q, self.BM), p.batch * p.heads_q)
        self._timed(lambda: self._fwd[grid](q, k, v, mask, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                                            *lse.stride(), p.seq_q, p.seq_kv, p.heads_q, p.group, p.scale, **c))
        return o, lse

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        mask, c = self._common(p, q)
        D = (d_o.float() * o.float()).sum(-1).contiguous()  # rowsum(dO * O), [B][Hq][Sq]
        dq = torch.empty(p.batch, p.heads_q, p.seq_q, p.head_dim_qk, dtype=q.dtype, device=self.device)
        dk = torch.empty(p.batch, p.heads_kv, p.seq_kv, p.head_dim_qk, dtype=q.dtype, device=self.device)
        dv = torch.empty(p.batch, p.heads_kv, p.seq_kv, p.head_dim_v, dtype=q.dtype, device=self.device)

        def launch():
            self._bwd_kv[(self._triton.cdiv(p.seq_kv, self.BN), p.batch * p.heads_kv)](
                q, k, v, mask, lse, D, d_lse, d_o, dk, dv, *q.stride(), *k.stride(), *v.stride(), *d_o.stride(), *lse.stride(),
                *dk.stride(), *dv.stride(), p.seq_q, p.seq_kv, p.heads_q, p.heads_kv, p.group, p.scale, **c)
            self._bwd_q[(self._triton.cdiv(p.seq_q, self.BM), p.batch * p.heads_q)](
                q, k, v, mask, lse, D, d_lse, d_o, dq, *q.stride(), *k.stride(), *v.stride(), *d_o.stride(), *lse.stride(),
                *dq.stride(), p.seq_q, p.seq_kv, p.heads_q, p.group, p.scale, **c)
        self._timed(launch)
        return dq, dk, dv
