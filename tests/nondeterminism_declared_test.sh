#!/usr/bin/env bash
# Declared nondeterministic outputs (docs/plugins.md "Flags", docs/python-backends.md): a
# backend whose dK and dV differ in their last bit run to run (atomic adds) is judged against
# the reference every run either way; the determinism check reports them only when the backend
# did not declare them (AF_NONDETERMINISTIC_DK | _DV for plugins, nondeterministic_outputs for
# Python adapters).
#   nondeterminism_declared_test.sh ATTNFUZZ SOURCE_DIR plugin|python [PYTHON]
set -u
bin=$1 src=$2 kind=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
case_file=$src/corpus/seed-flex-lse-merge.json  # fp32: keys split, a band and the rest merged
if [ "$kind" = plugin ]; then
  plugins=$(dirname "$bin")/plugins
  declared="plugin:$plugins/libattnfuzz_plugin_atomic_declared.so" name_d=plugin.atomic_declared
  undeclared="plugin:$plugins/libattnfuzz_plugin_atomic_undeclared.so" name_u=plugin.atomic_undeclared
else
  export ATTNFUZZ_PYTHON=$4 ATTNFUZZ_PY_PACKAGE_DIR=$src/python PYTHONPATH=$src/tests/python
  if ! "$ATTNFUZZ_PYTHON" -c "import torch, numpy" 2>/dev/null; then
    echo "SKIP: $ATTNFUZZ_PYTHON has no torch/numpy (run ci/setup.sh)"; exit 77
  fi
  declared="py:atomic_order_adapter:AtomicDeclared" name_d=py.atomic_declared
  undeclared="py:atomic_order_adapter:AtomicUndeclared" name_u=py.atomic_undeclared
fi

"$bin" run "$case_file" --backends "$declared" >"$tmp/declared" 2>&1
rc=$?
check "declared: exit 0, no finding (got $rc)" "[ $rc -eq 0 ] && ! grep -q nondeterministic'\$' $tmp/declared && ! grep -q '/nondeterministic/' $tmp/declared"
check "declared: run says dK, dV are not checked bitwise" "grep -q '^declared  $name_d: dK, dV may differ run to run (.*): judged against the reference, not checked bitwise' $tmp/declared"
check "declared: dK and dV still judged against the reference (ok rows)" \
  "grep -Eq '^$name_d +single .* dK .* ok' $tmp/declared && grep -Eq '^$name_d +single .* dV .* ok' $tmp/declared"

"$bin" run "$case_file" --backends "$undeclared" >"$tmp/undeclared" 2>&1
rc=$?
check "undeclared: exit 1 (got $rc)" "[ $rc -eq 1 ]"
for t in dK dV; do
  check "undeclared: a nondeterministic finding on $t" "grep -q '$name_u/single/$t/nondeterministic/' $tmp/undeclared"
done
check "undeclared: nothing else is found (O, LSE, dQ repeat; the numbers are within the contract)" \
  "! grep -E '$name_u/[a-z_]+/[A-Za-z]+/' $tmp/undeclared | grep -v '/nondeterministic/' | grep -q ."
"$bin" run "$case_file" --backends "$undeclared" --no-determinism-check >"$tmp/once" 2>&1
rc=$?
check "undeclared, run once: exit 0 (the jitter alone is no mismatch; got $rc)" "[ $rc -eq 0 ]"

if [ "$kind" = python ]; then  # a declaration naming no output is refused at start-up
  "$bin" run "$case_file" --backends "py:atomic_order_adapter:BadDeclaration" >"$tmp/bad" 2>"$tmp/bad.err"
  rc=$?
  check "python: an unknown output in nondeterministic_outputs: exit 2 naming it (got $rc)" \
    "[ $rc -eq 2 ] && grep -q 'nondeterministic_outputs' $tmp/bad.err && grep -q 'dX' $tmp/bad.err"
  # A class the module does not have is named as missing, not as "not an Adapter subclass".
  "$bin" run "$case_file" --backends "py:atomic_order_adapter:NoSuchAdapter" >"$tmp/missing" 2>"$tmp/missing.err"
  rc=$?
  check "python: a class the module lacks: exit 2, 'has no attribute NoSuchAdapter' (got $rc)" \
    "[ $rc -eq 2 ] && grep -q 'module atomic_order_adapter (.*) has no attribute NoSuchAdapter' $tmp/missing.err"
fi
exit $fail
