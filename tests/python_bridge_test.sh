#!/usr/bin/env bash
# The Python bridge end to end (docs/python-backends.md): the shipped adapters pass small cases
# with no false alarm, planted bugs are flagged, faults become clear errors, another protocol
# version is refused, the doc holds the minimal adapter verbatim, and the score bias (and its
# gradient, dBias) reaches the adapters that declare it (and only those).
#   python_bridge_test.sh ATTNFUZZ SOURCE_DIR PYTHON [all|correct|faults|own|bias|dbias]
# The sections (1-2 correct, 3 faults, 4 own, 5 bias, 6 dbias) run as separate ctests, side by side.
set -uo pipefail
bin=$1 src=$2 section=${4:-all}
want() { [ "$section" = all ] || [ "$section" = "$1" ]; }
export ATTNFUZZ_PYTHON=$3 ATTNFUZZ_PY_PACKAGE_DIR=$src/python PYTHONPATH=$src/tests/python
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
if ! "$ATTNFUZZ_PYTHON" -c "import torch, numpy" 2>/dev/null; then
  echo "SKIP: $ATTNFUZZ_PYTHON has no torch/numpy (run ci/setup.sh)"; exit 77
fi

if want correct; then
# 1. The doc holds the minimal adapter verbatim.
"$ATTNFUZZ_PYTHON" - "$src/docs/python-backends.md" "$src/python/attnfuzz_py/adapters/minimal.py" <<'PY' || fail "docs/python-backends.md does not hold minimal.py verbatim"
import sys
doc, code = (open(p).read() for p in sys.argv[1:])
sys.exit(0 if "```python\n" + code + "```" in doc else 1)
PY

py=attnfuzz_py.adapters
correct="py:$py.minimal:Minimal,py:$py.flex:FlexEager,py:$py.sdpa:Sdpa?kernel=math,py:$py.sdpa:Sdpa?kernel=flash,py:$py.jax_sdpa:JaxSdpa,py:$py.jax_sdpa:JaxF32Logits,py:$py.triton_flash:TritonFlash?device=cpu"
# 2. No false alarm: the bundled cases and generated toy cases (masks, GQA, layouts, dtypes, softcap).
"$bin" generate --seed 7 --count 3 --tier toy --out "$work/cases" >/dev/null || fail "generate"
for c in "$src/corpus/seed-flex-lse-merge.json" "$src/corpus/gqa-bf16-kv-split.json" "$work"/cases/*.json; do
  "$bin" run "$c" --backends "$correct" --no-determinism-check >"$work/out.txt" 2>&1
  rc=$?
  [ $rc = 0 ] || { fail "correct adapters on $(basename "$c"): exit $rc"; grep -E "FAIL|error|finding" "$work/out.txt" | head -5; }
  grep -q "py.flex_eager .* ok " "$work/out.txt" || fail "flex_eager did not run on $(basename "$c")"
  cp "$work/out.txt" "$work/correct-$(basename "$c" .json).txt"
done

# The Triton example kernel ran (interpreted; fp32 and fp16) on the seed case, JAX where installed.
grep -q "py.triton_flash.interpreted .*dK .* ok " "$work/correct-seed-flex-lse-merge.txt" || fail "the Triton adapter did not run on the seed case"
if "$ATTNFUZZ_PYTHON" -c "import jax" 2>/dev/null; then
  grep -q "py.jax.xla .*dQ .* ok " "$work/correct-seed-flex-lse-merge.txt" || fail "the JAX adapter did not run on the seed case"
  grep -q "py.jax.f32_logits .*dQ .* ok " "$work/correct-seed-flex-lse-merge.txt" || fail "the JAX seed formulation did not run on the seed case"
else
  echo "note: no JAX in $ATTNFUZZ_PYTHON: the JAX adapter declined every case (visibly)"
fi

fi

if want faults; then
# 3. Planted bugs are flagged, faults are clear errors.
expect() {  # expect ADAPTER EXIT_CODE PATTERN [env...]
  local a=$1 want=$2 pat=$3; shift 3
  env "$@" "$bin" run "$src/corpus/seed-flex-lse-merge.json" --backends "reference,py:bridge_test_adapters:$a" --no-determinism-check >"$work/$a.txt" 2>&1
  local rc=$?
  [ $rc = "$want" ] || fail "$a: exit $rc, expected $want"
  grep -q -- "$pat" "$work/$a.txt" || { fail "$a: no '$pat' in the output"; tail -5 "$work/$a.txt"; }
}
expect ScaledO 1 "py.scaled_o/single/O/"
expect IgnoresDlse 1 "py.ignores_dlse/merged/dQ/"
expect Raises 1 "ValueError: planted error in forward"
expect RaisesHuge 1 "ValueError: huge xxxx" ATTNFUZZ_PY_TIMEOUT_S=30
expect Crashes 1 "the Python worker died during forward (killed by signal 6"
expect Hangs 1 "the Python worker hung during forward" ATTNFUZZ_PY_TIMEOUT_S=3
expect CompilesSlowly 0 "py.compiles_slowly .* ok " ATTNFUZZ_PY_TIMEOUT_S=3
expect CompilesForever 1 "the Python worker hung during forward" ATTNFUZZ_PY_TIMEOUT_S=2 ATTNFUZZ_COMPILE_LIMIT_S=3
# In a campaign the compile notices reach the case watchdog too (through the attnfuzz worker).
# A case budget, not a time budget: a case still in flight when the time is up is abandoned, not judged.
camp() {  # camp ADAPTER OUT [env...]: a 5-case campaign, a 3 s case watchdog
  local a=$1 out=$2; shift 2
  env "$@" "$bin" campaign --cases 5 --seconds 120 --jobs 1 --timeout 3 --no-minimize --quiet --tier toy --seed 3 \
    --backends "py:bridge_test_adapters:$a" --out "$work/$out" >"$work/$out.txt" 2>&1
}
camp CompilesSlowly camp-slow
grep -q "timeout" "$work/camp-slow/summary.json" 2>/dev/null && fail "CompilesSlowly: the campaign counted a compile as a timeout"
grep -qE "^done +[1-9]" "$work/camp-slow.txt" || { fail "CompilesSlowly: the campaign ran no case"; tail -5 "$work/camp-slow.txt"; }
camp CompilesForever camp-forever ATTNFUZZ_COMPILE_LIMIT_S=2
ls "$work/camp-forever/findings" 2>/dev/null | grep -q -- "---timeout-" || { fail "CompilesForever: no timeout finding"; tail -5 "$work/camp-forever.txt"; }
expect WrongShape 1 "o has shape \[1, 2, 63, 32\], expected \[1, 2, 64, 32\]"
expect Declines 0 "planted: declines every problem"
protocol=$(sed -n 's/^inline constexpr int kPythonBridgeProtocol = \([0-9]*\);$/\1/p' "$src/backends/python_bridge_protocol.h")
expect OtherProtocol 2 "speaks bridge protocol 999, this attnfuzz speaks $protocol (use the python/ package of the same attnfuzz checkout)"
# A start-up error is one line on stderr that names the log file holding the traceback (issue 26, item 18).
TMPDIR=$work "$bin" run "$src/corpus/seed-flex-lse-merge.json" --backends "py:no_such_module_for_attnfuzz:Thing" >"$work/nomod.out" 2>"$work/nomod.err"
rc=$?
[ $rc = 2 ] || fail "an adapter that cannot be imported: exit $rc, expected 2"
[ "$(wc -l <"$work/nomod.err")" = 1 ] || { fail "an adapter that cannot be imported: $(wc -l <"$work/nomod.err") lines on stderr, expected 1"; head -c 600 "$work/nomod.err"; }
log=$(grep -o 'traceback in [^)]*' "$work/nomod.err" | cut -d' ' -f3)
[ -n "$log" ] && grep -q "ModuleNotFoundError" "$log" || fail "the start-up error names no log file holding the traceback: $(head -c 300 "$work/nomod.err")"
expect UnknownDevice 2 'device "tpu": attnfuzz knows "cpu" and "cuda"'
# The ignores-dLSE adapter passes the single call: the bug shows only through the merge.
grep -q "py.ignores_dlse .*single .*dQ .* ok " "$work/IgnoresDlse.txt" || fail "IgnoresDlse: the single call's dQ should pass"

fi

if want own; then
# 4. "Bring your own Triton kernel" as docs/python-backends.md says, step by step: a copy of the
# example with a kernels' module and a name of its own, found through PYTHONPATH.
mkdir -p "$work/my_kernel"
cp "$src/python/attnfuzz_py/adapters/triton_flash.py" "$work/my_kernel/my_adapter.py"
cp "$src/python/attnfuzz_py/adapters/triton_flash_kernels.py" "$work/my_kernel/my_kernels.py"
sed -i 's/^KERNELS = .*/KERNELS = "my_kernels"/; s/self.name = "triton_flash"/self.name = "my_flash"/' "$work/my_kernel/my_adapter.py"
(cd "$src" && PYTHONPATH=$work/my_kernel "$bin" run corpus/seed-flex-lse-merge.json --backends 'reference,py:my_adapter:TritonFlash?device=cpu' \
  --no-determinism-check >"$work/my_kernel.txt" 2>&1) || fail "the doc's own-Triton-kernel steps: exit $?"
grep -q "py.my_flash.interpreted .*q_split.*dV .* ok " "$work/my_kernel.txt" || { fail "the doc's own-Triton-kernel steps did not run the copy"; tail -5 "$work/my_kernel.txt"; }
grep -q "my_kernel/my_adapter.py" "$src/docs/python-backends.md" && grep -q 'KERNELS = "my_kernels"' "$src/docs/python-backends.md" \
  || fail "docs/python-backends.md no longer gives these steps"
fi

if want bias; then
# 5. The score bias (harness/case.h, ScoreBias) through the bridge: every kind (a tensor over
# several broadcast patterns, ALiBi, a relative table), with masks, GQA, Sq != Skv, Dqk != Dv, the
# three dtypes, a softcap and compositions, through SDPA's math kernel and FlexEager beside the C++
# torch.math, and on four of the cases (a worker's start-up is most of a run) SDPA's CPU flash
# kernel, Minimal and the JAX adapters too (Minimal on the softcap's as well): no finding, and
# each adapter ran (a skip would pass vacuously). A planted adapter that drops the bias is
# flagged; adapters that do not declare it are refused every biased call, with the reason.
mkdir -p "$work/bias"
head='"format": "attnfuzz-case/1", "grads": {"d_out": {"dist": "normal"}, "d_lse": {"dist": "normal", "sigma": 0.5}}'
gqa='"batch": 2, "heads_q": 4, "heads_kv": 2, "seq_q": 24, "seq_kv": 40, "head_dim_qk": 16'
case_file() { echo "{$head, $2}" >"$work/bias/$1.json"; }
case_file tensor-full-q-split '"seed": 11, "shape": {'"$gqa"'}, "dtype": "fp32", "mask": {"kind": "causal", "align": "bottom_right"},
  "bias": {"kind": "tensor", "values": {"dist": "normal", "sigma": 2.0}}, "composition": {"kind": "q_split", "bounds": [10]}'
case_file tensor-heads-kv-fp16 '"seed": 12, "shape": {'"$gqa"'}, "dtype": "fp16",
  "mask": {"kind": "sliding_window", "left": 8, "right": 2, "align": "top_left"},
  "bias": {"kind": "tensor", "spans": ["heads", "kv"], "values": {"dist": "normal", "sigma": 2.0}},
  "composition": {"kind": "kv_split", "bounds": [16]}'
case_file tensor-batch-kv-bf16-unmasked '"seed": 13, "shape": {'"$gqa"'}, "dtype": "bf16",
  "bias": {"kind": "tensor", "spans": ["batch", "kv"], "values": {"dist": "normal", "sigma": 2.0}}'
# A bias constant along the keys (here one scalar) moves the LSE alone: the softmax does not see it.
case_file tensor-scalar-mask-partition '"seed": 14, "dtype": "fp32",
  "shape": {"batch": 1, "heads_q": 2, "seq_q": 20, "seq_kv": 20, "head_dim_qk": 8},
  "mask": {"kind": "prefix_lm", "prefix": 6, "align": "top_left"}, "bias": {"kind": "tensor", "spans": [], "values": {"dist": "normal", "sigma": 2.0}},
  "composition": {"kind": "mask_partition", "window": {"left": 4, "right": 0, "align": "top_left"}}'
case_file alibi-nested '"seed": 15, "shape": {"batch": 1, "heads_q": 4, "heads_kv": 1, "seq_q": 32, "seq_kv": 32, "head_dim_qk": 16}, "dtype": "fp32",
  "mask": {"kind": "causal", "align": "top_left"}, "bias": {"kind": "alibi"},
  "composition": {"kind": "kv_split", "bounds": [20], "children": [{"kind": "q_split", "bounds": [12]}]}'
case_file relative-outliers-bf16 '"seed": 16, "shape": {'"$gqa"'}, "dtype": "bf16", "mask": {"kind": "causal", "align": "bottom_right"},
  "bias": {"kind": "relative", "values": {"dist": "outliers", "sigma": 0.5, "fraction": 0.2, "magnitude": -10000}},
  "composition": {"kind": "q_split", "bounds": [8, 16]}'
case_file relative-fp16-document '"seed": 17, "shape": {"batch": 2, "heads_q": 2, "seq_q": 18, "seq_kv": 18, "head_dim_qk": 16}, "dtype": "fp16",
  "mask": {"kind": "document", "segments_q": [5, 7, 6], "segments_kv": [5, 7, 6]},
  "bias": {"kind": "relative", "values": {"dist": "normal", "sigma": 1.5}}, "composition": {"kind": "kv_split", "bounds": [9]}'
case_file softcap-tensor-heads-q-kv '"seed": 18, "shape": {'"$gqa"', "head_dim_v": 24}, "dtype": "fp32", "softcap": 5.0,
  "mask": {"kind": "causal", "align": "bottom_right"},
  "bias": {"kind": "tensor", "spans": ["heads", "q", "kv"], "values": {"dist": "normal", "sigma": 2.0}}'
py=attnfuzz_py.adapters
jax=no
"$ATTNFUZZ_PYTHON" -c "import jax" 2>/dev/null && jax=yes
biased="torch.math,py:$py.sdpa:Sdpa?kernel=math,py:$py.flex:FlexEager"
more="py:$py.sdpa:Sdpa?kernel=flash,py:$py.minimal:Minimal"
[ $jax = yes ] && more="$more,py:$py.jax_sdpa:JaxSdpa,py:$py.jax_sdpa:JaxF32Logits"
all_on=" tensor-full-q-split tensor-batch-kv-bf16-unmasked alibi-nested relative-fp16-document "
ran() {  # ran OUT BACKEND [no_lse]: the backend ran the single call, and every composition but
  # those an adapter without an LSE cannot merge (no_lse)
  grep -qE "^$2 +single .* ok " "$1" || fail "$2 did not run the single call of $(basename "$1" .txt)"
  local skips
  skips=$(grep -E "^$2 +[^ ]+ +skipped" "$1")
  [ "${3:-}" = no_lse ] && skips=$(echo "$skips" | grep -v "returns no LSE, so its parts cannot be merged")
  if [ -n "$skips" ]; then fail "$2 was skipped on $(basename "$1" .txt)"; echo "$skips" | head -2; fi
}
for c in "$work"/bias/*.json; do
  name=$(basename "$c" .json)
  out="$work/bias-$name.txt"
  all=no backends=$biased
  case $all_on in *" $name "*) all=yes backends="$biased,$more" ;; esac
  case $name in softcap*) all=yes backends="$biased,py:$py.minimal:Minimal" ;; esac  # the others take no softcap
  "$bin" run "$c" --backends "$backends" --no-determinism-check >"$out" 2>&1
  rc=$?
  [ $rc = 0 ] || { fail "biased case $(basename "$c"): exit $rc"; grep -E "FAIL|error|finding" "$out" | head -5; }
  for b in torch.math py.flex_eager; do ran "$out" "$b"; done
  case $c in
    *softcap*) grep -qE "^py.sdpa.math +single +skipped: .*softcap" "$out" || fail "SDPA should decline the softcap of $(basename "$c")" ;;
    *)
      ran "$out" py.sdpa.math no_lse
      if [ $all = yes ]; then
        ran "$out" py.sdpa.flash no_lse
        if [ $jax = yes ]; then for b in py.jax.xla py.jax.f32_logits; do ran "$out" $b no_lse; done; fi
      fi
      ;;
  esac
  if [ $all = yes ] && grep -q '"dtype": "fp32"' "$c"; then ran "$out" py.minimal; fi
done
[ $jax = yes ] || echo "note: no JAX in $ATTNFUZZ_PYTHON: the JAX adapters' bias was not run"

# A planted adapter that declares the bias and drops it is flagged.
sed 's/"fp16"/"fp32"/' "$work/bias/tensor-heads-kv-fp16.json" >"$work/ignores-bias.json"
"$bin" run "$work/ignores-bias.json" --backends "reference,py:bridge_test_adapters:IgnoresBias" --no-determinism-check >"$work/ignores-bias.txt" 2>&1
rc=$?
[ $rc = 1 ] || fail "IgnoresBias: exit $rc, expected 1"
grep -q "py.ignores_bias/single/O/" "$work/ignores-bias.txt" || { fail "IgnoresBias: the dropped bias is not flagged"; tail -5 "$work/ignores-bias.txt"; }

# Adapters that do not declare the bias are refused every biased call, with the reason; the
# same adapters run the case without its bias.
declines="py:bridge_test_adapters:NoBias,py:$py.triton_flash:TritonFlash?device=cpu"
"$bin" run "$work/bias/alibi-nested.json" --backends "reference,$declines" --no-determinism-check >"$work/no-bias.txt" 2>&1
rc=$?
[ $rc = 0 ] || fail "adapters without the bias beside the reference: exit $rc, expected 0"
for b in py.no_bias py.triton_flash.interpreted; do
  grep -qE "^$b +single +skipped: .*a score bias \(takes none\)" "$work/no-bias.txt" || { fail "$b: no refusal of the bias"; grep "^$b" "$work/no-bias.txt" | head -3; }
  if grep -qE "^$b .* ok " "$work/no-bias.txt"; then fail "$b ran a biased call"; fi
done
sed 's/, "bias": {"kind": "alibi"}//' "$work/bias/alibi-nested.json" >"$work/alibi-nested-unbiased.json"
"$bin" run "$work/alibi-nested-unbiased.json" --backends "reference,$declines" --no-determinism-check >"$work/no-bias-unbiased.txt" 2>&1 ||
  fail "adapters without the bias on the case without it: exit $?"
for b in py.no_bias py.triton_flash.interpreted; do ran "$work/no-bias-unbiased.txt" "$b"; done
fi

if want dbias; then
# 6. dBias (a bias with "requires_grad": true) judged end to end: every kind and several broadcasts,
# the three dtypes, a softcap, compositions (dBias summed over the calls), beside torch.math:
# Minimal (fp32), FlexEager, and where the case has no dLSE (which they cannot take, and attnfuzz
# cannot add to dBias) SDPA's math kernel and the JAX adapters. No finding, and each ran the
# single call's dBias. Planted dBias bugs are flagged; an adapter that takes a bias but declares no
# bias_grad (SDPA's flash kernel: torch's CPU kernel refuses a mask that requires grad) is refused.
mkdir -p "$work/dbias"
with_dlse='"grads": {"d_out": {"dist": "normal"}, "d_lse": {"dist": "normal", "sigma": 0.5}}'
no_dlse='"grads": {"d_out": {"dist": "normal"}, "d_lse": {"dist": "zero"}}'
gqa='"batch": 2, "heads_q": 4, "heads_kv": 2, "seq_q": 24, "seq_kv": 40, "head_dim_qk": 16'
grad='"requires_grad": true'
dcase() { echo "{\"format\": \"attnfuzz-case/1\", $2}" >"$work/dbias/$1.json"; }
dcase heads-kv-q-split "$with_dlse, \"seed\": 21, \"shape\": {$gqa}, \"dtype\": \"fp32\", \"mask\": {\"kind\": \"causal\", \"align\": \"bottom_right\"},
  \"bias\": {\"kind\": \"tensor\", \"spans\": [\"heads\", \"kv\"], \"values\": {\"dist\": \"normal\", \"sigma\": 2.0}, $grad},
  \"composition\": {\"kind\": \"q_split\", \"bounds\": [10]}"
dcase batch-kv-bf16-nodlse "$no_dlse, \"seed\": 22, \"shape\": {$gqa}, \"dtype\": \"bf16\",
  \"bias\": {\"kind\": \"tensor\", \"spans\": [\"batch\", \"kv\"], \"values\": {\"dist\": \"normal\", \"sigma\": 2.0}, $grad}"
dcase full-fp16-kv-split-nodlse "$no_dlse, \"seed\": 23, \"shape\": {$gqa}, \"dtype\": \"fp16\",
  \"mask\": {\"kind\": \"sliding_window\", \"left\": 8, \"right\": 2, \"align\": \"top_left\"},
  \"bias\": {\"kind\": \"tensor\", \"values\": {\"dist\": \"normal\", \"sigma\": 2.0}, $grad}, \"composition\": {\"kind\": \"kv_split\", \"bounds\": [16]}"
dcase alibi-nested "$with_dlse, \"seed\": 24, \"shape\": {\"batch\": 1, \"heads_q\": 4, \"heads_kv\": 1, \"seq_q\": 32, \"seq_kv\": 32, \"head_dim_qk\": 16},
  \"dtype\": \"fp32\", \"mask\": {\"kind\": \"causal\", \"align\": \"top_left\"}, \"bias\": {\"kind\": \"alibi\", $grad},
  \"composition\": {\"kind\": \"kv_split\", \"bounds\": [20], \"children\": [{\"kind\": \"q_split\", \"bounds\": [12]}]}"
dcase relative-bf16-q-split-nodlse "$no_dlse, \"seed\": 26, \"shape\": {$gqa}, \"dtype\": \"bf16\", \"mask\": {\"kind\": \"causal\", \"align\": \"bottom_right\"},
  \"bias\": {\"kind\": \"relative\", \"values\": {\"dist\": \"normal\", \"sigma\": 1.5}, $grad}, \"composition\": {\"kind\": \"q_split\", \"bounds\": [8, 16]}"
# A bias constant along the keys: without dLSE its dBias is 0 (the softmax does not see it), the rounding of a sum.
dcase queries-mask-partition-nodlse "$no_dlse, \"seed\": 27, \"dtype\": \"fp32\", \"shape\": {\"batch\": 1, \"heads_q\": 2, \"seq_q\": 20, \"seq_kv\": 20, \"head_dim_qk\": 8},
  \"mask\": {\"kind\": \"prefix_lm\", \"prefix\": 6, \"align\": \"top_left\"},
  \"bias\": {\"kind\": \"tensor\", \"spans\": [\"q\"], \"values\": {\"dist\": \"normal\", \"sigma\": 2.0}, $grad},
  \"composition\": {\"kind\": \"mask_partition\", \"window\": {\"left\": 4, \"right\": 0, \"align\": \"top_left\"}}"
dcase softcap-heads-q-kv "$with_dlse, \"seed\": 25, \"shape\": {$gqa, \"head_dim_v\": 24}, \"dtype\": \"fp32\", \"softcap\": 5.0,
  \"mask\": {\"kind\": \"causal\", \"align\": \"bottom_right\"},
  \"bias\": {\"kind\": \"tensor\", \"spans\": [\"heads\", \"q\", \"kv\"], \"values\": {\"dist\": \"normal\", \"sigma\": 2.0}, $grad}"
py=attnfuzz_py.adapters
no_dlse_adapters="py.sdpa.math"
backends="torch.math,py:$py.minimal:Minimal,py:$py.flex:FlexEager,py:$py.sdpa:Sdpa?kernel=math"
if "$ATTNFUZZ_PYTHON" -c "import jax" 2>/dev/null; then
  backends="$backends,py:$py.jax_sdpa:JaxSdpa,py:$py.jax_sdpa:JaxF32Logits" no_dlse_adapters="$no_dlse_adapters py.jax.xla py.jax.f32_logits"
else
  echo "note: no JAX in $ATTNFUZZ_PYTHON: the JAX adapters' dBias was not run"
fi
ran_dbias() { grep -qE "^$2 +single +[a-z0-9]+ +dBias .* ok " "$1" || { fail "$2 did not pass the single call's dBias of $(basename "$1" .txt)"; grep -E "^$2 " "$1" | head -2; }; }
for c in "$work"/dbias/*.json; do
  name=$(basename "$c" .json)
  out="$work/dbias-$name.txt"
  "$bin" run "$c" --backends "$backends" --no-determinism-check >"$out" 2>&1
  rc=$?
  [ $rc = 0 ] || { fail "dBias case $name: exit $rc"; grep -E "FAIL|error|finding" "$out" | head -5; }
  for b in torch.math py.flex_eager; do ran_dbias "$out" $b; done
  grep -q '"dtype": "fp32"' "$c" && ran_dbias "$out" py.minimal
  for b in $no_dlse_adapters; do
    case $name in
      softcap*) ;;  # they take no softcap
      *nodlse) ran_dbias "$out" "$b" ;;
      *) grep -qE "^$b +single +skipped: .*ignores dLSE and the case asks dBias" "$out" || fail "$b: no refusal of dBias with a dLSE on $name" ;;
    esac
  done
done

# Planted dBias bugs are flagged: 1.02 times dBias, and dBias not summed over a broadcast dimension.
for a in DbiasScaled:dbias_scaled DbiasNotSummed:dbias_not_summed; do
  "$bin" run "$work/dbias/heads-kv-q-split.json" --backends "reference,py:bridge_test_adapters:${a%%:*}" --no-determinism-check >"$work/${a%%:*}.txt" 2>&1
  rc=$?
  [ $rc = 1 ] || fail "${a%%:*}: exit $rc, expected 1"
  grep -q "py.${a##*:}/single/dBias/" "$work/${a%%:*}.txt" || { fail "${a%%:*}: the dBias bug is not flagged"; tail -5 "$work/${a%%:*}.txt"; }
done
# An adapter that takes a bias and declares no bias_grad is refused a call that asks dBias, with the reason.
"$bin" run "$work/dbias/heads-kv-q-split.json" --backends "reference,py:$py.sdpa:Sdpa?kernel=flash" --no-determinism-check >"$work/dbias-flash.txt" 2>&1 ||
  fail "Sdpa?kernel=flash beside the reference on a dBias case: exit $?"
grep -qE "^py.sdpa.flash +single +skipped: .*a bias that requires a gradient \(returns no dBias\)" "$work/dbias-flash.txt" ||
  { fail "py.sdpa.flash: no refusal of dBias"; grep "^py.sdpa.flash" "$work/dbias-flash.txt" | head -2; }
fi

if [ $fails = 0 ]; then echo "python bridge ($section): all checks passed"; else echo "python bridge ($section): $fails check(s) failed"; exit 1; fi
