#!/usr/bin/env bash
# Session 6, after the softcap chain term: the GPU terms test, and the FlexEager softcap dK row.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
R=$(cd "$C/.." && pwd)
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$torch_dir/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ATTNFUZZ_PYTHON=python3 ATTNFUZZ_PY_PACKAGE_DIR=$R/python
timeout 60 "$C/bin/test_gpu_error_terms" 2>&1 | grep -E "cases|PASSED|FAILED|Failure|differs" | head -12
timeout 90 "$C/bin/attnfuzz" run "$C/flexeager-softcap.json" --no-determinism-check --oracle-device cuda \
  --backends "py:attnfuzz_py.adapters.flex:FlexEager?device=cuda" 2>&1 | grep -E "py.flex|finding" | cut -c1-220
