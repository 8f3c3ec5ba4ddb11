#!/usr/bin/env bash
# Declared batch invariance (docs/verdicts.md, "Batch invariance") through `run`, for a plugin
# (AF_BATCH_INVARIANT: the mutant zoo) and a Python adapter (batch_invariant = True): a backend
# that keeps the promise passes and `run` says it was held to it; one whose bits move inside a
# larger batch is a batch_variant finding; the same kernel without the promise passes, and
# --batch-invariance-all measures it in a note; --no-determinism-check skips the check.
#   batch_invariance_test.sh ATTNFUZZ SOURCE_DIR [PYTHON]
set -u
bin=$1 src=$2 py=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
mutants=$(dirname "$bin")/mutants
# Sq = 16 (4 query tiles), Skv = 12: KV tiles of 4 alone (4 work items), of 8 in a batch of 4 (16).
cat >"$tmp/case.json" <<'JSON'
{"format":"attnfuzz-case/1","seed":7,"dtype":"fp32","shape":{"batch":1,"heads_q":1,"heads_kv":1,"seq_q":16,"seq_kv":12,"head_dim_qk":4,"head_dim_v":3}}
JSON

"$bin" run "$tmp/case.json" --backends "plugin:$mutants/libattnfuzz_mutant_ok.so" >"$tmp/ok" 2>&1
rc=$?
check "mutant_ok: exit 0 (got $rc)" "[ $rc -eq 0 ]"
check "mutant_ok: run says it is held to batch invariance" \
  "grep -q '^declared  plugin.mutant_ok: batch invariant: its problems run again inside a batch of 4 must give the same bits' $tmp/ok"

"$bin" run "$tmp/case.json" --backends "plugin:$mutants/libattnfuzz_mutant_batch_dependent_split.so" >"$tmp/split" 2>&1
rc=$?
check "batch_dependent_split: exit 1 (got $rc)" "[ $rc -eq 1 ]"
check "batch_dependent_split: a batch_variant finding on O" "grep -q 'plugin.mutant_batch_dependent_split/single/O/batch_variant/fp32/' $tmp/split"
check "batch_dependent_split: no other class" "! grep -Eq '/(mismatch|nondeterministic|contract_violation)/' $tmp/split"
"$bin" run "$tmp/case.json" --no-determinism-check --backends "plugin:$mutants/libattnfuzz_mutant_batch_dependent_split.so" >"$tmp/split-off" 2>&1
rc=$?
check "batch_dependent_split, --no-determinism-check: exit 0 (got $rc)" "[ $rc -eq 0 ]"
"$bin" run "$tmp/case.json" --batch-invariance-all --isolate --backends "plugin:$mutants/libattnfuzz_mutant_ok.so" >"$tmp/all-isolate" 2>&1
rc=$?
check "--batch-invariance-all --isolate: exit 2, one line (got $rc)" "[ $rc -eq 2 ] && [ \$(wc -l <$tmp/all-isolate) -eq 1 ]"

if [ -n "$py" ] && "$py" -c "import torch, numpy" 2>/dev/null; then
  export ATTNFUZZ_PYTHON=$py ATTNFUZZ_PY_PACKAGE_DIR=$src/python PYTHONPATH=$src/tests/python
  "$bin" run "$tmp/case.json" --backends "py:batch_keyed_adapter:BatchKeyedDeclared" >"$tmp/py-declared" 2>&1
  rc=$?
  check "python, declared: exit 1 (got $rc)" "[ $rc -eq 1 ]"
  check "python, declared: a batch_variant finding on O" "grep -q 'py.batch_keyed_declared/single/O/batch_variant/fp32/' $tmp/py-declared"
  "$bin" run "$tmp/case.json" --backends "py:batch_keyed_adapter:BatchKeyedUndeclared" >"$tmp/py-undeclared" 2>&1
  rc=$?
  check "python, undeclared: exit 0 (got $rc)" "[ $rc -eq 0 ]"
  "$bin" run "$tmp/case.json" --batch-invariance-all --backends "py:batch_keyed_adapter:BatchKeyedUndeclared" >"$tmp/py-all" 2>&1
  rc=$?
  check "python, undeclared, --batch-invariance-all: exit 0, a note says O moved (got $rc)" \
    "[ $rc -eq 0 ] && grep -q 'note (py.batch_keyed_undeclared): batch invariance (not declared): elements moved inside a batch of 4: O 48' $tmp/py-all"
else
  echo "python part skipped: no interpreter with torch and numpy given"
fi
[ $fail -eq 0 ] || { for f in "$tmp"/*; do echo "--- $f"; cat "$f"; done; }
exit $fail
