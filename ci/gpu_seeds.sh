#!/usr/bin/env bash
# The two seeds on the GPU machine (docs/python-backends.md, "The seeds on the H200"), from a
# checkout carried there with the gpu bundle unpacked in .carry (ci/gpu_bundle.sh build/gpu):
#   the JAX seed: corpus/jax-seed-{bf16,fp16,fp32}.json through JaxSdpa (xla, cudnn, xla at
#     precision=highest), JaxF32Logits (the seed's formulation) and torch.flash;
#   JAX's cuDNN path under XLA's deterministic-ops flag, with the determinism check;
#   the FlexAttention seed's first half: the fp32 case through FlexCompiled at matmul_precision
#     highest and high.
# Logs under OUT (default ./seeds-out). Runs one command at a time: JAX and FlexAttention
# compile on first use, and every Python backend is a process of its own on the one GPU.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/seeds-out}
mkdir -p "$out"
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$torch_dir/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$root/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ATTNFUZZ_PYTHON=${ATTNFUZZ_PYTHON:-python3} ATTNFUZZ_PY_PACKAGE_DIR=$root/python
export ATTNFUZZ_PY_TIMEOUT_S=${ATTNFUZZ_PY_TIMEOUT_S:-900} ATTNFUZZ_PY_START_TIMEOUT_S=${ATTNFUZZ_PY_START_TIMEOUT_S:-600}
bin=$root/.carry/bin/attnfuzz
jax=attnfuzz_py.adapters.jax_sdpa
flex=attnfuzz_py.adapters.flex
backends="py:$jax:JaxSdpa?implementation=xla,py:$jax:JaxSdpa?implementation=cudnn,py:$jax:JaxSdpa?implementation=xla&precision=highest,py:$jax:JaxF32Logits,torch.flash"
for d in bf16 fp16 fp32; do
  echo "=== jax seed $d"
  "$bin" run "$root/corpus/jax-seed-$d.json" --reference cuda --no-determinism-check --backends "$backends" 2>&1 | grep -v "Source Location"
done >"$out/jax-seed.log"
XLA_FLAGS=--xla_gpu_deterministic_ops=true "$bin" run "$root/corpus/jax-seed-bf16.json" --reference cuda \
  --backends "py:$jax:JaxSdpa?implementation=cudnn" >"$out/jax-cudnn-deterministic.log" 2>&1
for p in highest high; do
  echo "=== FlexCompiled matmul_precision=$p"
  "$bin" run "$root/corpus/jax-seed-fp32.json" --reference cuda --no-determinism-check \
    --backends "py:$flex:FlexCompiled?device=cuda&shapes=static&matmul_precision=$p" 2>&1
done >"$out/flex-tf32.log"
grep -h "finding(s)" "$out"/*.log
