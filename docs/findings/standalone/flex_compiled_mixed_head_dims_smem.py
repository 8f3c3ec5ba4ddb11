"""torch.compile(flex_attention) on an H200 (sm90) with Dqk = 64 and Dv = 192 or 256, bf16, GQA:
does Inductor find a Triton config that fits shared memory? Standalone: torch only.

    python3 flex_compiled_mixed_head_dims_smem.py

The attnfuzz campaign saw FlexCompiled (which pads Dv = 192 to 256) fail with "No valid triton
configs. OutOfMemoryError: out of resource: triton_tem_fused_flex_attention_0 Required: 264192
Hardware limit: 232448" on B=2, Hq=8, Hkv=2, Sq=135, Skv=768, Dqk=64, Dv=192, bf16.
"""
import torch
from torch.nn.attention.flex_attention import flex_attention

torch.manual_seed(0)
flex = torch.compile(flex_attention, dynamic=False)
for dv in (128, 192, 256):
    q = torch.randn(2, 8, 135, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 2, 768, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 2, 768, dv, device="cuda", dtype=torch.bfloat16)
    try:
        out = flex(q, k, v, enable_gqa=True)
        ref = flex_attention(q, k, v, enable_gqa=True)
        print(f"Dqk=64 Dv={dv}: ok, max |compiled - eager| = {(out - ref).abs().max().item():.3g}")
    except Exception as e:
        print(f"Dqk=64 Dv={dv}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
print("torch", torch.__version__, torch.cuda.get_device_name())
