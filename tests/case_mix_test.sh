#!/usr/bin/env bash
# Cases aimed at the backends' support envelopes (docs/fuzzing.md, "Aimed cases"), end to end:
# - bad --case-mix / --edge-share values: exit 2 with one line, before any case;
# - an aimed campaign shares its cases out, counts them in summary.json's coverage.case_mix and
#   prints an `aimed` line per backend; the CPU backends, which enforce their envelopes, run
#   every case aimed inside theirs;
# - a blind campaign (the CPU default) aims nothing;
# (the shares are those of fresh draws: these campaigns are unguided, --mutation-share 0)
# - `generate --backends` writes cases inside the named backend's envelope;
# - --breaking-share 1: every case carries values that break kernels, counted per feature in
#   summary.json's coverage.case_mix.values; the default draws none.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

for flag in "--case-mix sideways" "--edge-share 1.5" "--edge-share -0.1" "--tier huge" "--breaking-share 2" "--breaking-share -1" "--bias-share 1.5" "--bias-share -1"; do
  for cmd in campaign check; do
    "$bin" $cmd --cases 5 --jobs 1 --quiet --backends torch.math $flag --out "$tmp/bad" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    check "$cmd $flag: exit 2, one line, nothing written (got $rc)" \
      "[ $rc -eq 2 ] && [ \$(wc -l <$tmp/err) -eq 1 ] && [ ! -e $tmp/bad ]"
  done
done
"$bin" generate --backends torch.math --edge-share 2 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "generate --edge-share 2: exit 2, one line (got $rc)" "[ $rc -eq 2 ] && [ \$(wc -l <$tmp/err) -eq 1 ]"

# Values that break kernels (docs/fuzzing.md): with --breaking-share 1 every case holds one, and
# summary.json counts each feature; by default a quarter of a CPU campaign's cases hold one; with 0, none.
"$bin" campaign --mutation-share 0 --cases 30 --jobs 2 --tier toy --seed 5 --no-minimize --quiet --breaking-share 1 \
  --backends torch.math --out "$tmp/breaking" >"$tmp/breaking.txt" 2>&1
rc=$?
check "--breaking-share 1: exit 0 (got $rc)" "[ $rc -eq 0 ]"
v="d['coverage']['case_mix']['values']"
check "--breaking-share 1: every case counted under a value feature, several features" \
  "[ \"\$(json $tmp/breaking/summary.json \"sum(x['cases'] for x in $v.values())\")\" -ge 30 ] && [ \"\$(json $tmp/breaking/summary.json \"len($v)\")\" -ge 4 ]"
check "--breaking-share 1: judged ones counted" "[ \"\$(json $tmp/breaking/summary.json \"sum(x['judged'] for x in $v.values())\")\" -ge 25 ]"
"$bin" campaign --mutation-share 0 --cases 30 --jobs 2 --tier toy --seed 5 --no-minimize --quiet --backends torch.math --out "$tmp/default" >/dev/null 2>&1
check "a CPU campaign's default draws breaking values in about a quarter of its cases" \
  "n=\$(json $tmp/default/summary.json \"sum(x['cases'] for x in $v.values())\"); [ \$n -ge 2 ] && [ \$n -le 15 ]"
"$bin" campaign --mutation-share 0 --cases 30 --jobs 2 --tier toy --seed 5 --no-minimize --quiet --breaking-share 0 --bias-share 0 --backends torch.math \
  --out "$tmp/plain" >/dev/null 2>&1
check "--breaking-share 0 draws none" "[ \"\$(json $tmp/plain/summary.json \"len($v)\")\" = 0 ]"

# Score biases (docs/fuzzing.md, "Score biases"): with --bias-share 1 every case has one, counted
# per kind under each backend's sides in summary.json; with 0, none.
"$bin" campaign --mutation-share 0 --cases 30 --jobs 2 --tier toy --seed 5 --no-minimize --quiet --bias-share 1 --backends torch.math \
  --out "$tmp/bias" >/dev/null 2>&1
rc=$?
b="d['coverage']['features']['sides']['torch.math']['bias']"
check "--bias-share 1: exit 0, every judged case with a bias, several kinds (got $rc)" \
  "[ $rc -eq 0 ] && [ \"\$(json $tmp/bias/summary.json \"$b.get('none', 0)\")\" = 0 ] && [ \"\$(json $tmp/bias/summary.json \"len($b)\")\" -ge 2 ]"
check "--bias-share 0: no bias" \
  "[ \"\$(json $tmp/plain/summary.json \"sorted(d['coverage']['features']['sides']['torch.math']['bias'])\")\" = \"['none']\" ]"

# An aimed campaign over two CPU backends with envelopes of their own (no softcap; Dqk == Dv).
"$bin" campaign --mutation-share 0 --case-mix aimed --cases 60 --jobs 2 --tier toy --seed 5 --no-minimize --quiet \
  --backends torch.sdpa.cpu_flash,torch.sdpa.math --out "$tmp/aimed" >"$tmp/aimed.txt" 2>&1
rc=$?
check "aimed campaign: exit 0 (got $rc)" "[ $rc -eq 0 ]"
s=$tmp/aimed/summary.json
for b in torch.sdpa.cpu_flash torch.sdpa.math; do
  m="d['coverage']['case_mix']['aimed']['$b']"
  check "aimed campaign: $b got half the cases inside its envelope, and ran every one" \
    "[ \"\$(json $s \"$m['inside']\")\" = 30 ] && [ \"\$(json $s \"$m['inside_ran']\")\" = 30 ]"
  check "aimed campaign: $b's cases just outside: none (the envelope is enforced)" "[ \"\$(json $s \"$m['edge']\")\" = 0 ]"
  check "aimed campaign: an aimed line for $b" "grep -q '^aimed     $b: 30 inside, 30 ran (100%)' $tmp/aimed.txt"
done
check "aimed campaign: every case judged" "grep -q '^done .*60 cases (60 judged, 0 unjudged)' $tmp/aimed.txt"
check "aimed campaign: the report shows the case mix" "grep -q 'Case mix' $tmp/aimed/report.html"

# The CPU default stays blind.
"$bin" campaign --mutation-share 0 --cases 10 --jobs 1 --tier toy --no-minimize --quiet --backends torch.sdpa.math --out "$tmp/blind" >"$tmp/blind.txt" 2>&1
check "blind campaign: 10 blind cases, none aimed" \
  "[ \"\$(json $tmp/blind/summary.json \"d['coverage']['case_mix']['blind']\")\" = 10 ] && ! grep -q '^aimed' $tmp/blind.txt"

# generate --backends: inside the envelope (the CPU flash kernel: Dqk == Dv, no softcap).
"$bin" generate --backends torch.sdpa.cpu_flash --count 40 --tier small --seed 3 --out "$tmp/gen" >/dev/null 2>&1
inside=$(python3 - "$tmp/gen" <<'PY'
import json, os, sys
n = 0
for f in os.listdir(sys.argv[1]):
    c = json.load(open(os.path.join(sys.argv[1], f)))
    s = c["shape"]
    n += s["head_dim_qk"] == s["head_dim_v"] and c.get("softcap") is None
print(n)
PY
)
check "generate --backends torch.sdpa.cpu_flash: 40 of 40 cases inside its envelope (got $inside)" "[ '$inside' = 40 ]"
exit $fail
