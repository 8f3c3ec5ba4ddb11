#!/usr/bin/env bash
# Stop 47's second device call: the score bias on the GPU (oracle and backend tests), the
# H-9 and open cuDNN reproducers again, and a campaign of the default GPU backends with the
# bias and the new breaking-values default, each finding through `run`.
set -u
root=$PWD
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$torch_dir/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$root/.carry/lib"
export ATTNFUZZ_PYTHON=python3 ATTNFUZZ_PY_PACKAGE_DIR=$root/python ATTNFUZZ_PY_TIMEOUT_S=300 TORCHINDUCTOR_COMPILE_THREADS=1
bin=$root/.carry/bin
cat $root/.carry/commit
nvidia-smi --query-gpu=name --format=csv,noheader
# 1. The tests, beside the campaign (small sizes).
( for t in test_gpu_oracles test_gpu_error_terms test_cudnn_backend test_gpu_backends test_flash_kernels; do
    timeout 240 "$bin/$t" > "$OUT/$t.log" 2>&1; echo "$t: exit $?" >> "$OUT/tests.txt"
  done ) &
tests_pid=$!
# 2. A campaign: default GPU backends, bias in 30% of the cases, default breaking values.
camp=$OUT/bias-47
timeout -k 5 330 "$bin/attnfuzz" campaign --seconds 200 --seed 47 --jobs 10 --devices 0 --timeout 120 --bias-share 0.3 \
  --no-minimize --known "$root/docs/findings/repro" --out "$camp" > "$OUT/bias-47.log" 2>&1
echo "campaign: exit $?"; grep -E "^(done|coverage|aimed|known|cells) " "$OUT/bias-47.log"
python3 -c "import json; d=json.load(open('$camp/summary.json')); f=d['coverage']['features']['sides']; print({b: f[b].get('bias') for b in f}); print(d['coverage']['case_mix'].get('values'))"
# 3. Each finding through `run` with its backend, six at a time.
ls "$camp"/findings/*.json 2>/dev/null | xargs -r -P 6 -I{} sh -c '
  b=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[\"finding\"][\"signature\"][\"backend\"])" "$1") || exit 0
  { echo "=== $(basename "$1") ($b)"; timeout 100 "$0" run --no-determinism-check --backends "$b" "$1" 2>&1 | grep -vE "^ *$" | tail -25; } > "$1.run.txt"
' "$bin/attnfuzz" {}
cat "$camp"/findings/*.run.txt > "$OUT/bias-47-runs.log" 2>/dev/null; rm -f "$camp"/findings/*.run.txt
# 4. The open torch.cudnn NaN case beside cudnn and torch.efficient.
timeout 120 "$bin/attnfuzz" run --no-determinism-check --backends torch.cudnn,cudnn,torch.efficient \
  "$root/docs/findings/open/s47-torch-cudnn-dQ-nan-fp16-logits-near-overflow.json" > "$OUT/s47-torch-cudnn-nan.log" 2>&1
echo "s47 torch.cudnn nan rerun: exit $?"; grep -E "dQ|finding|nan|note" "$OUT/s47-torch-cudnn-nan.log" | head -20
# 5. A bias case through the Python adapters on the GPU.
timeout 200 "$bin/attnfuzz" run --no-determinism-check --backends "torch.efficient,py:attnfuzz_py.adapters.sdpa:Sdpa?kernel=efficient&device=cuda,py:attnfuzz_py.adapters.flex:FlexEager?device=cuda" \
  "$root/.carry-s47/bias_case.json" > "$OUT/py-bias.log" 2>&1
echo "py bias: exit $?"; tail -30 "$OUT/py-bias.log"
wait $tests_pid
cat "$OUT/tests.txt"
for t in test_gpu_oracles test_gpu_error_terms test_cudnn_backend test_gpu_backends test_flash_kernels; do
  grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/$t.log" | head -8
done
(cd "$OUT" && tar czf bias-47.tgz --exclude='*.html' bias-47 && rm -rf bias-47)
