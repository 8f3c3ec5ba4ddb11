"""Does LibTorch's SDPA backward repeat bit for bit, per kernel? (N-1, docs/findings/README.md)

Standalone: plain PyTorch on a CUDA GPU, nothing from attnfuzz. For the flash, memory-efficient
and cuDNN kernels of torch.nn.functional.scaled_dot_product_attention it
  1. asks PyTorch itself: the backward under torch.use_deterministic_algorithms(True), where
     an operation without a deterministic implementation raises (its "alert");
  2. measures: the same backward five times on identical inputs, and which of dQ, dK, dV
     differ bitwise between runs.

    python3 sdpa_backward_determinism.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
           "cudnn": SDPBackend.CUDNN_ATTENTION}


def grads(kernel, q, k, v, d_out):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel([kernel]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(d_out)
    torch.cuda.synchronize()
    return q.grad, k.grad, v.grad


def main():
    print("torch", torch.__version__, torch.cuda.get_device_name(0))
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (2, 8, 2048, 64)
    q, k, v, d_out = (torch.randn(shape, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    for name, kernel in KERNELS.items():
        torch.use_deterministic_algorithms(True)
        try:
            grads(kernel, q, k, v, d_out)
            alert = "no alert (PyTorch treats it as deterministic)"
        except RuntimeError as e:
            alert = "alert: " + str(e).splitlines()[0][:160]
        finally:
            torch.use_deterministic_algorithms(False)
        first = grads(kernel, q, k, v, d_out)
        differ = set()
        for _ in range(4):
            again = grads(kernel, q, k, v, d_out)
            for label, a, b in zip(("dQ", "dK", "dV"), first, again):
                if not torch.equal(a, b):
                    differ.add(label)
        print(f"{name:9s} use_deterministic_algorithms: {alert}")
        print(f"{name:9s} five runs, bitwise different: {sorted(differ) or 'none'}")


if __name__ == "__main__":
    main()
