# shellcheck shell=bash disable=SC2034  # sourced: its variables are the sourcing script's
# Sourced (never run) by the scripts that run on the GPU machine from the repository root with
# .carry/ from ci/gpu_bundle.sh: ci/gpu_run.sh and ci/gpu_python_smoke.sh. Needs `root` set (the
# repository). Sets OUT (default $root/gpu-out, created), torch_dir and site (the machine's torch
# package and its site-packages), LD_LIBRARY_PATH (LibTorch, cuDNN and the CUDA libraries of that
# torch package, then .carry/lib), bin (.carry/bin) and ATTNFUZZ_PLUGIN_PATH.
OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT"
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$torch_dir/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$root/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$root/.carry/bin
# Reproducers name plugins by file name (harness/plugin_path.h): the carried ones are looked up here.
export ATTNFUZZ_PLUGIN_PATH="$root/.carry/plugins:$root/.carry/mutants${ATTNFUZZ_PLUGIN_PATH:+:$ATTNFUZZ_PLUGIN_PATH}"
