"""torch.nn.functional.scaled_dot_product_attention with one kernel forced, from Python: a
parity check against the LibTorch C++ backends (torch.sdpa.*, oracles/torch_sdpa*.cpp).

    py:attnfuzz_py.adapters.sdpa:Sdpa?kernel=math|flash|efficient|cudnn[&device=cuda]

Like the C++ backends: the mask as an additive float mask (0 visible, -inf masked; with a score
bias, the bias where visible, and the bias alone in its broadcast shape where every key is
visible), no LSE from the public API, backward through autograd from dO only (no dLSE), and for the flash kernel K and
V repeated per group (dK, dV summed back by autograd); fully masked rows follow the convention
with the math kernel only. On the CPU, math and flash exist.

dBias: the float attn_mask is built from a leaf bias of the bias's broadcast shape that requires
grad, and autograd returns its gradient (the broadcast and masked_fill's backward sum and zero it).
Declared (envelope "bias_grad") per kernel, by what torch 2.11 does with a mask that requires grad:
- math: a gradient for attn_mask (measured on the CPU, fp32/fp16/bf16, broadcast masks included);
- efficient (CUDA only): _scaled_dot_product_efficient_attention_backward computes grad_bias
  (torch/_meta_registrations.py, grad_input_mask[3]); declared from torch's source, NOT YET RUN
  on a GPU;
- flash: the CPU kernel refuses a mask that requires grad (sdp_utils_cpp.h, check_attn_mask_shape:
  "No available kernel"), and the CUDA kernel takes no mask at all: not declared;
- cudnn: _scaled_dot_product_cudnn_attention_backward returns dQ, dK, dV only (its meta
  registration): not declared.
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnfuzz_py import Adapter

_KERNELS = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


class Sdpa(Adapter):
    contracts = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}
    returns_lse = False
    backward_takes_dlse = False
    # The kernels whose backward gives attn_mask a gradient (the module's docstring).
    _BIAS_GRAD_KERNELS = ("math", "efficient")

    def __init__(self, kernel="math", device="cpu"):
        if kernel not in _KERNELS:
            raise ValueError(f"kernel must be one of {sorted(_KERNELS)}, got '{kernel}'")
        self.kernel, self.device = kernel, device
        # The bias goes in the float attn_mask; its gradient only where the kernel returns one.
        self.envelope = {"bias": True, "bias_grad": kernel in self._BIAS_GRAD_KERNELS}
        self.name = f"sdpa.{kernel}" + (".cuda" if device == "cuda" else "")
        self.version = f"torch {torch.__version__}"
        self.masked_rows_zero = kernel == "math"

    def supports(self, p):
        if self.device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device visible to this Python"
        if self.device == "cpu" and self.kernel in ("efficient", "cudnn"):
            return f"the {self.kernel} kernel runs on CUDA only"
        if p.softcap is not None:
            return "SDPA has no softcap"
        if self.kernel == "flash" and p.head_dim_qk != p.head_dim_v:
            return "the flash kernel needs Dqk == Dv"
        return None

    def _attend(self, p, q, k, v, bias=None):
        """SDPA's output; bias: the score bias to use (a leaf that requires grad), else p.bias."""
        visible = p.dense_mask(q.device)
        bias = p.bias if bias is None else bias
        if bias is None:
            mask = torch.zeros(p.mask.shape, dtype=q.dtype, device=q.device).masked_fill(~visible, float("-inf"))
        elif bool(visible.all()):  # SDPA's own broadcast of the mask's dimensions of extent 1 is then what runs
            mask = bias
        else:
            mask = bias.expand(visible.shape).masked_fill(~visible, float("-inf"))
        gqa = p.group > 1
        if gqa and self.kernel != "math":
            k, v = k.repeat_interleave(p.group, 1), v.repeat_interleave(p.group, 1)
            gqa = False
        with sdpa_kernel([_KERNELS[self.kernel]]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=p.scale, enable_gqa=gqa)

    def forward(self, p, q, k, v):
        with torch.no_grad():
            return self._attend(p, q, k, v), None

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        inputs = [q, k, v]
        bias = None
        if p.bias_requires_grad:  # a leaf of the bias's own (broadcast) shape: its gradient is dBias
            bias = p.bias.detach().requires_grad_()
            inputs.append(bias)
        out = self._attend(p, q, k, v, bias)
        return torch.autograd.grad([out], inputs, [d_o.to(out.dtype)], allow_unused=True)
