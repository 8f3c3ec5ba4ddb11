#!/usr/bin/env bash
# Session 6, a short check after the product floor: the open reproducers and the final call's
# GPU findings replayed with this build (GPU oracles).
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$torch_dir/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
A="$C/bin/attnfuzz"
timeout 100 "$A" replay "$C/open" 2>&1 | grep -vE "^note" | tail -9
timeout 60 "$A" replay "$C/gputoy" 2>&1 | tail -4
timeout 90 "$A" replay "$C/cpu512" --oracle-device cuda 2>&1 | tail -4
