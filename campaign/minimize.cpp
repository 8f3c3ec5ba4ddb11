#include "campaign/minimize.h"

#include "harness/inputs.h"

namespace attnfuzz {

ShrinkReport shrink(const Case& c, const std::function<bool(const Case&)>& keeps, const CandidateFn& candidates,
                    const SizeFn& size, int max_attempts) {
  ShrinkReport r;
  r.minimized = c;
  r.size_before = size(c);
  bool progress = true;
  while (progress && r.attempts < max_attempts) {
    progress = false;
    const uint64_t current = size(r.minimized);
    for (const Case& cand : candidates(r.minimized)) {
      if (size(cand) >= current) continue;  // every accepted step strictly shrinks: termination
      ++r.attempts;
      if (keeps(cand)) {
        r.minimized = cand;
        ++r.steps;
        progress = true;
        break;
      }
      if (r.attempts >= max_attempts) break;
    }
  }
  r.size_after = size(r.minimized);
  return r;
}

namespace {
DiffOptions options_for(const Signature& sig) {
  DiffOptions opt;
  opt.fingerprint_all = false;
  opt.check_determinism = sig.cls == FindingClass::nondeterministic;
  opt.include_single = true;
  return opt;
}
}  // namespace

bool signature_holds(const Case& c, const Signature& sig, const std::vector<Backend*>& backends, const OracleSet& oracles) {
  const DiffReport r = run_differential(c, backends, oracles, options_for(sig));
  for (const auto& f : r.findings)
    if (f.signature == sig) return true;
  return false;
}

Reproducer minimize(const Reproducer& r, const std::vector<Backend*>& backends, const OracleSet& oracles,
                    const CandidateFn& candidates, const SizeFn& size, ShrinkReport* report) {
  const Signature& sig = r.finding.signature;
  ShrinkReport rep = shrink(r.c, [&](const Case& c) { return signature_holds(c, sig, backends, oracles); }, candidates, size);
  Reproducer out = r;
  out.c = rep.minimized;
  const DiffReport final_run = run_differential(out.c, backends, oracles, options_for(sig));
  for (const auto& f : final_run.findings)
    if (f.signature == sig) out.finding = f;
  out.input_checksum = final_run.input_checksum;
  if (report) *report = rep;
  return out;
}

}  // namespace attnfuzz
