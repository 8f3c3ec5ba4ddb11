#!/usr/bin/env bash
# Session 8 (issue 10): the sensitivity grid on the H200 machine, one bench_sensitivity process per
# cell group, 16 at once (72 s): S <= 256 with the CPU oracles, S = 1024 and the GPU kernels with
# the GPU set. Staging: a gpu build's bench_sensitivity stripped into the carry folder's bin/, the
# zoo's mutant_ok into its lib/ (stage.sh). CSVs and logs come back in $OUT/sens.tgz.
#   bash .carry-v8/sens8.sh
C=$(cd "$(dirname "$0")" && pwd)
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$torch_dir/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_NUM_THREADS=1
B="$C/bin/bench_sensitivity"; P="$C/lib/libattnfuzz_mutant_ok.so"
mkdir -p "$OUT/sens"; cd "$OUT/sens" || exit 1
TO=${TO:-545}
go() { local name=$1; shift; ( s=$(date +%s); timeout "$TO" "$B" "$@" --csv "$name.csv" > "$name.log" 2>&1; echo "exit $? after $(( $(date +%s) - s )) s" >> "$name.log" ) & }
for d in fp32 fp16 bf16; do go small-$d --plugin "$P" --dtype $d --seq 16,64,256 --dim 16,64,128; done
for d in fp32 fp16 bf16; do for D in 16 64 128; do go s1024-$d-$D --plugin "$P" --dtype $d --seq 1024 --dim $D --oracle-device cuda; done; done
go flash-bf16-1024-128--cuda.flash --backend cuda.flash --dtype bf16 --seq 1024 --dim 128 --oracle-device cuda
go flash-fp16-1024-128--cuda.flash --backend cuda.flash --dtype fp16 --seq 1024 --dim 128 --oracle-device cuda
go cudnn-bf16-1024-128--cudnn --backend cudnn --dtype bf16 --seq 1024 --dim 128 --oracle-device cuda
go flash-bf16-2048-64--cuda.flash --backend cuda.flash --dtype bf16 --seq 2048 --dim 64 --oracle-device cuda
wait
for f in *.log; do echo "=== $f"; grep -E "^### |worst|exit|rror|what" "$f" | tail -8; done
cd "$OUT" && tar czf sens.tgz sens && rm -rf sens
