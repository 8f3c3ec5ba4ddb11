#pragma once
// What the ragged-batch backend tests share (tests/test_gpu_varlen.cpp: LibTorch's varlen ops;
// tests/test_gpu_cudnn_varlen.cpp: cuDNN's ragged offsets and paged K/V): hand-made ragged
// problems, a zero-output stand-in for the host-side acceptance checks, judging a backend on each
// file's own random ragged cases (every finding fails), and checking that the same judging flags a
// fault planted in O. Each file keeps its own case maker and backend list.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "harness/backend.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "harness/inputs.h"

namespace attnfuzz::test {

// The full problem of a hand-made case (seed 41) of shape `s`, mask `mask` and lengths `ragged`
// (none: a dense batch). The Problem points at its case's mask expression, so the cases are kept
// for the life of the test process.
inline Problem problem_of(const Shape& s, const MaskExpr& mask, std::optional<Ragged> ragged, DType d = DType::f16) {
  static std::deque<Case> cases;
  Case& c = cases.emplace_back();
  c.seed = 41;
  c.shape = s;
  c.dtype = d;
  c.mask = mask;
  c.ragged = std::move(ragged);
  return full_problem(c, generate_inputs(c));
}

// A ragged batch: the sequences' query and key lengths, the gaps after each, the tail and the
// page size (0: K and V unpaged).
inline Ragged ragged_of(std::vector<int64_t> lq, std::vector<int64_t> lk, int64_t gap_q = 0, int64_t gap_kv = 0, int64_t tail = 0,
                        int64_t page_size = 0) {
  Ragged r;
  r.lens_q = std::move(lq);
  r.lens_kv = std::move(lk);
  r.gap_q = gap_q;
  r.gap_kv = gap_kv;
  r.tail = tail;
  r.page_size = page_size;
  return r;
}

// A mask no varlen interface computes: random (density 0.5, seed 3), per head.
inline MaskExpr random_mask() {
  MaskExpr random;
  random.kind = MaskExpr::Kind::random;
  random.density = 0.5;
  random.seed = 3;
  return random;
}

// On a GPU: the backend declines the case's mask itself (its reason, one line, says "declines the
// mask"), and so does the composition engine (UnsupportedError), before any kernel runs.
inline void expect_mask_declined(Backend& be, const Case& c) {
  const Inputs in = generate_inputs(c);
  const auto why = be.unsupported_reason(full_problem(c, in));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("declines the mask"), std::string::npos) << *why;
  EXPECT_EQ(why->find('\n'), std::string::npos) << *why;
  EXPECT_THROW(run_composition(be, c, in, Composition{}), UnsupportedError);
}

// On a GPU: the backend takes the case (no refusal of its own), and the differential judges it
// with no finding; every run skipped fails too where `every_run` (the case is inside what the
// backend takes).
inline void expect_taken_without_finding(Backend& be, const Case& c, bool every_run = false) {
  ASSERT_NO_THROW(validate(c)) << write_case(c);
  const auto why = be.unsupported_reason(full_problem(c, generate_inputs(c)));
  EXPECT_FALSE(why) << be.name() << ": " << *why;
  DiffOptions dopt;
  dopt.gpu_health = gpu_health;
  const DiffReport r = run_differential(c, {&be}, default_oracles(), dopt);
  ASSERT_FALSE(r.gpu_error) << write_case(c);
  if (every_run) {
    for (const auto& run : r.runs) EXPECT_FALSE(run.skipped) << run.skip_reason;
  }
  for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail << "\n" << write_case(c);
}

// A stand-in with a real backend's contract and envelope whose forward and backward return
// zeros: with it the composition engine says, without a GPU, which runs a backend's own checks
// accept. Each test says those checks in its own unsupported_reason.
class ZeroProbe : public Backend {
 public:
  explicit ZeroProbe(std::unique_ptr<Backend> real) : real_(std::move(real)) {}
  std::string name() const override { return real_->name() + ".probe"; }
  std::optional<Contract> contract(DType d) const override { return real_->contract(d); }
  SupportEnvelope envelope() const override { return real_->envelope(); }
  bool backward_takes_dlse() const override { return false; }
  bool masked_rows_zero() const override { return false; }
  Forward forward(const Problem& p) override {
    const Shape& s = p.shape;
    return {Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}), Tensor({s.batch, s.heads_q, s.seq_q})};
  }
  Gradients backward(const Problem& p, const Forward&, const Tensor&, const Tensor&) override {
    const Shape& s = p.shape;
    return {Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}),
            Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v})};
  }

 private:
  std::unique_ptr<Backend> real_;
};

// The runs run_differential makes of a case (the single call, and the case's composition where
// it has one), each accepted by the probe or not.
inline std::vector<bool> probe_runs(Backend& probe, const Case& c, const Inputs& in) {
  std::vector<Composition> comps{Composition{}};
  if (!(c.composition == Composition{})) comps.push_back(c.composition);
  std::vector<bool> accepted;
  for (const Composition& comp : comps) {
    try {
      run_composition(probe, c, in, comp);
      accepted.push_back(true);
    } catch (const UnsupportedError&) {
      accepted.push_back(false);
    }
  }
  return accepted;
}

// Of the runs of the cases `make_case` draws for seeds 0 to n_cases - 1, how many the probe
// accepts (printed with `what`, e.g. "the adapter accepts").
struct Acceptance {
  int runs = 0, accepted = 0;
};
inline Acceptance accepted_runs(Backend& probe, const std::function<Case(uint64_t)>& make_case, int n_cases, const std::string& what) {
  Acceptance a;
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(n_cases); ++seed) {
    const Case c = make_case(seed);
    EXPECT_NO_THROW(validate(c)) << write_case(c);
    for (bool ok : probe_runs(probe, c, generate_inputs(c))) {
      ++a.runs;
      a.accepted += ok;
    }
  }
  std::cout << "  " << probe.name() << ": " << what << " " << a.accepted << " of " << a.runs << " runs\n";
  return a;
}

// The backend with a planted fault: one output element of a row that sees a key (where the case
// has one) is moved by 0.5, everything else as the backend returns it; every other answer the
// differential asks of a backend is the inner backend's.
class Planted final : public Backend {
 public:
  explicit Planted(Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name() + ".planted"; }
  Device device() const override { return inner_.device(); }
  std::optional<Contract> contract(DType d) const override { return inner_.contract(d); }
  SupportEnvelope envelope() const override { return inner_.envelope(); }
  std::optional<std::string> unsupported_reason(const Problem& p) const override { return inner_.unsupported_reason(p); }
  bool masked_rows_zero() const override { return inner_.masked_rows_zero(); }
  double lse_unit_roundoff(DType d) const override { return inner_.lse_unit_roundoff(d); }
  bool backward_takes_dlse() const override { return inner_.backward_takes_dlse(); }
  std::vector<TensorId> nondeterministic_outputs() const override { return inner_.nondeterministic_outputs(); }
  std::string why_nondeterministic() const override { return inner_.why_nondeterministic(); }
  Forward forward(const Problem& p) override {
    Forward f = inner_.forward(p);
    const Shape& s = p.shape;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t i = 0; i < p.call_len_q(b); ++i)
        for (int64_t j = 0; j < p.call_len_kv(b); ++j)
          if (p.visible(b, 0, i, j)) {
            *f.o.at(b, 0, i) += 0.5;
            planted = true;
            return f;
          }
    return f;
  }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return inner_.backward(p, f, d_out, d_lse);
  }
  bool planted = false;

 private:
  Backend& inner_;
};

// The fault planted (Planted) in the cases `make_case` draws for seeds 0, 1, ... (up to 200, until
// it was planted in 20) is flagged on O in every case where it was planted, and it was planted in
// at least 10.
inline void expect_planted_o_fault_flagged(Backend& be, const std::function<Case(uint64_t)>& make_case) {
  int planted = 0, flagged = 0;
  for (uint64_t seed = 0; seed < 200 && planted < 20; ++seed) {
    const Case c = make_case(seed);
    Planted bad(be);
    DiffOptions dopt;
    dopt.gpu_health = gpu_health;
    dopt.check_determinism = false;
    const DiffReport r = run_differential(c, {&bad}, default_oracles(), dopt);
    ASSERT_FALSE(r.gpu_error) << write_case(c);
    // Planted where a run that planted was also judged: a run whose later call the backend
    // declined is skipped as a whole, and its planted error with it.
    const bool judged = std::any_of(r.runs.begin(), r.runs.end(), [](const auto& run) { return !run.skipped; });
    if (!bad.planted || !judged) continue;
    ++planted;
    const bool on_o = std::any_of(r.findings.begin(), r.findings.end(), [](const Finding& f) { return f.signature.tensor == TensorId::O; });
    flagged += on_o;
    EXPECT_TRUE(on_o) << "a planted error of 0.5 in O went unflagged\n" << write_case(c);
  }
  std::cout << "  planted in " << planted << " cases, flagged in " << flagged << "\n";
  EXPECT_GE(planted, 10);
}

struct Tally {
  int runs = 0, ran = 0, cases = 0;
  int declined = 0;  // runs the adapter (or the envelope) declined before any library call
  std::map<std::string, int> skips;
};

// How judge_cases prints its tally: `digits_as_hash` groups the skip reasons with their numbers
// left out; `print_share` adds the share of the runs accepted to the last line.
struct TallyStyle {
  bool digits_as_hash = false;
  bool print_share = false;
};

// Each of the cases `make_case` draws for seeds 0 to n_cases - 1 through run_differential as
// test_gpu_backends.cpp judges them; every finding fails, and a GPU error stops the loop.
inline Tally judge_cases(Backend* be, const std::function<Case(uint64_t)>& make_case, int n_cases, TallyStyle style = {}) {
  Tally t;
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(n_cases); ++seed) {
    const Case c = make_case(seed);
    DiffOptions dopt;
    dopt.gpu_health = gpu_health;
    const DiffReport r = run_differential(c, {be}, default_oracles(), dopt);
    ++t.cases;
    for (const auto& run : r.runs) {
      ++t.runs;
      if (run.skipped) {
        if (run.skip_reason.find("does not support a part") != std::string::npos) ++t.declined;
        std::string why = run.skip_reason.substr(0, 200);
        if (style.digits_as_hash)
          for (char& ch : why)
            if (ch >= '0' && ch <= '9') ch = '#';
        ++t.skips[why];
      } else {
        ++t.ran;
      }
    }
    for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail << "\n" << write_case(c);
    if (r.gpu_error) {
      ADD_FAILURE() << "stopped after a GPU error (the CUDA context may be unusable); case seed " << c.seed << "\n" << write_case(c);
      break;
    }
  }
  for (const auto& [why, n] : t.skips) std::cout << "  skipped " << n << "x: " << why << "\n";
  std::cout << "  " << be->name() << ": ran " << t.ran << " of " << t.runs << " runs over " << t.cases << " ragged cases";
  if (style.print_share) std::cout << " (" << (t.runs ? 100 * t.ran / t.runs : 0) << "% accepted)";
  std::cout << "\n";
  return t;
}

// A backend that declined nearly everything would pass without testing anything: no finding on
// the cases, and more than half of the runs the adapter accepted ran (the rest the library refused
// with its own argument checks). How many the adapter accepts is each varlen test's own check, on
// the CPU (the refusal probes).
inline void expect_no_finding_on_ragged_cases(Backend* be, const std::function<Case(uint64_t)>& make_case, int n_cases,
                                              TallyStyle style = {}) {
  const Tally t = judge_cases(be, make_case, n_cases, style);
  EXPECT_GT(t.ran * 2, t.runs - t.declined) << be->name() << " ran too few of the runs it accepted to say anything";
  EXPECT_GT(t.ran * 4, t.runs) << be->name() << " ran too few of the runs to say anything";
}

}  // namespace attnfuzz::test
