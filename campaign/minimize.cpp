#include "campaign/minimize.h"

#include "harness/inputs.h"

namespace attnfuzz {

ShrinkReport shrink(const Case& c, const std::function<bool(const Case&)>& keeps, const CandidateFn& candidates, const SizeFn& size,
                    int max_attempts, const OutOfTime& out_of_time) {
  ShrinkReport r;
  r.minimized = c;
  r.size_before = size(c);
  bool progress = true;
  while (progress && r.attempts < max_attempts) {
    progress = false;
    const uint64_t current = size(r.minimized);
    for (const Case& cand : candidates(r.minimized)) {
      if (size(cand) >= current) continue;  // every accepted step strictly shrinks: termination
      if (out_of_time && out_of_time()) {
        r.out_of_time = true;
        r.size_after = size(r.minimized);
        return r;
      }
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

bool needs_determinism(const Signature& sig) {
  return sig.cls == FindingClass::nondeterministic || sig.cls == FindingClass::batch_variant;
}

int minimize_attempts(const Signature& sig) { return sig.cls == FindingClass::crash || sig.cls == FindingClass::timeout ? 30 : 5000; }

bool signature_holds(const Judge& judge, const Case& c, const Signature& sig) {
  for (const auto& f : judge(c))
    if (f.signature == sig) return true;
  return false;
}

Judge in_process_judge(const std::vector<Backend*>& backends, const OracleSet& oracles, bool check_determinism) {
  return [backends, oracles, check_determinism](const Case& c) {
    DiffOptions opt;
    opt.check_determinism = check_determinism;
    return run_differential(c, backends, oracles, opt).findings;
  };
}

Reproducer minimize(const Reproducer& r, const Judge& judge, const CandidateFn& candidates, const SizeFn& size, ShrinkReport* report,
                    const OutOfTime& out_of_time) {
  const Signature& sig = r.finding.signature;
  const ShrinkReport rep = shrink(
      r.c, [&](const Case& c) { return signature_holds(judge, c, sig); }, candidates, size, minimize_attempts(sig), out_of_time);
  Reproducer out = r;
  out.c = rep.minimized;
  for (const auto& f : judge(out.c))
    if (f.signature == sig) out.finding = f;
  out.input_checksum = checksum(generate_inputs(out.c));  // of the case recorded, whatever the last judgement said
  if (report) *report = rep;
  return out;
}

}  // namespace attnfuzz
