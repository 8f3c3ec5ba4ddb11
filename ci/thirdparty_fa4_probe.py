"""What FlashAttention-4 compiles for sm90, without a GPU: its kernels built under torch's
FakeTensorMode (FA4's own way to fill its cache ahead of time: flash_attn.cute.testing,
maybe_fake_tensor_mode), with FLASH_ATTENTION_ARCH=sm_90 and CUTE_DSL_ARCH=sm_90a. Compiling is
not running: this finds the configurations whose kernels FA4 refuses or fails to build, and the
compile times, not wrong numbers.

    PYTHONPATH=SITE:SITE/nvidia_cutlass_dsl/dsl_packages python ci/thirdparty_fa4_probe.py [--quick]

SITE: a site with flash-attn-4 and nvidia-cutlass-dsl for this Python (ci/thirdparty_carry.sh
--python 3.11 makes .carry-3p-cp311/site). One line per configuration: fwd/bwd ok with seconds,
or the error's first line.
"""
import os
import sys
import time

os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")
import warnings  # noqa: E402

warnings.filterwarnings("ignore")
import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from flash_attn.cute.interface import _flash_attn_bwd, _flash_attn_fwd  # noqa: E402


def probe(dtype, dqk, dv, hq=4, hkv=4, causal=False, window=(None, None), softcap=0.0, deterministic=False, sq=256, skv=256):
    row = f"{str(dtype).split('.')[-1]:8} Dqk={dqk:3} Dv={dv:3} H={hq}/{hkv} causal={int(causal)} window={window} softcap={softcap} det={int(deterministic)} Sq={sq} Skv={skv}"
    out = []
    with FakeTensorMode():
        q = torch.empty(2, sq, hq, dqk, dtype=dtype, device="cuda")
        k = torch.empty(2, skv, hkv, dqk, dtype=dtype, device="cuda")
        v = torch.empty(2, skv, hkv, dv, dtype=dtype, device="cuda")
        try:
            t0 = time.time()
            o, lse, *_ = _flash_attn_fwd(q, k, v, causal=causal, window_size_left=window[0], window_size_right=window[1],
                                         softcap=softcap, return_lse=True)
            out.append(f"fwd ok {time.time() - t0:.1f}s")
        except Exception as e:  # noqa: BLE001
            out.append("fwd FAIL " + f"{type(e).__name__}: {e}".splitlines()[0][:160])
            return row + " | " + " | ".join(out)
        try:
            t0 = time.time()
            _flash_attn_bwd(q, k, v, o, torch.empty_like(o), lse, None, causal, softcap, window_size_left=window[0],
                            window_size_right=window[1], deterministic=deterministic, dlse=torch.empty_like(lse))
            out.append(f"bwd ok {time.time() - t0:.1f}s")
        except Exception as e:  # noqa: BLE001
            out.append("bwd FAIL " + f"{type(e).__name__}: {e}".splitlines()[0][:160])
    return row + " | " + " | ".join(out)


def main():
    bf16, fp16 = torch.bfloat16, torch.float16
    quick = "--quick" in sys.argv
    cases = [dict(dtype=bf16, dqk=64, dv=64, causal=True)]
    if not quick:
        cases += [dict(dtype=fp16, dqk=64, dv=64, causal=True)]
        cases += [dict(dtype=bf16, dqk=d, dv=d) for d in (8, 16, 24, 40, 72, 96, 128, 160, 192, 256)]
        cases += [dict(dtype=bf16, dqk=a, dv=b) for a, b in ((64, 128), (128, 64), (192, 128), (128, 256), (256, 128))]
        cases += [dict(dtype=bf16, dqk=64, dv=64, hq=8, hkv=2), dict(dtype=bf16, dqk=128, dv=128, hq=6, hkv=2, causal=True),
                  dict(dtype=bf16, dqk=64, dv=128, hq=8, hkv=2)]
        cases += [dict(dtype=bf16, dqk=64, dv=64, window=(32, 0)), dict(dtype=bf16, dqk=64, dv=64, window=(32, 16)),
                  dict(dtype=bf16, dqk=64, dv=64, window=(None, 16)), dict(dtype=bf16, dqk=64, dv=64, window=(0, 0))]
        cases += [dict(dtype=bf16, dqk=64, dv=64, softcap=30.0), dict(dtype=bf16, dqk=128, dv=128, causal=True, softcap=50.0)]
        cases += [dict(dtype=bf16, dqk=64, dv=64, causal=True, deterministic=True),
                  dict(dtype=bf16, dqk=64, dv=64, hq=8, hkv=2, deterministic=True)]
        cases += [dict(dtype=bf16, dqk=64, dv=64, causal=True, sq=300, skv=77), dict(dtype=bf16, dqk=64, dv=64, sq=1, skv=1)]
    for c in cases:
        print(probe(**c), flush=True)


if __name__ == "__main__":
    main()
