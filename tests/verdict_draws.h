#pragma once
// Random judged tensors with planted errors, and the comparison of two verdicts of one tensor:
// what tests/test_verdict_sums.cpp (a reducer on the host) and tests/test_gpu_verdict.cpp (the
// GPU's) hold against harness/verdict.cpp's own sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/registry.h"
#include "generators/random_case.h"
#include "harness/differential.h"
#include "harness/verdict.h"
#include "oracles/emulated.h"

namespace attnfuzz::verdict_test {

constexpr double kRelative = 1e-9;

inline bool near(double a, double b) {
  if (a == b) return true;
  if (!std::isfinite(a) || !std::isfinite(b)) return false;
  return std::fabs(a - b) <= kRelative * std::max(std::fabs(a), std::fabs(b));
}

// Every difference between two verdicts of one tensor, or "" when they agree. Where the two
// name different worst blocks whose scores (ratio / limit) agree to within kRelative, those are
// a tie that the last bits of a sum decide: `*tie` is set and the blocks are not compared.
inline std::string difference(const TensorVerdict& host, const TensorVerdict& device, bool* tie = nullptr) {
  std::string out;
  auto same = [&](const char* what, bool ok) {
    if (!ok) out += std::string(" ") + what;
  };
  same("pass", host.pass == device.pass);
  same("class", host.failure == device.failure);
  same("fingerprint", host.print.label == device.print.label && host.print.rung == device.print.rung);
  const bool same_block = host.worst.granularity == device.worst.granularity && host.worst.where == device.worst.where;
  const bool tied = !same_block && host.worst.limit > 0 && device.worst.limit > 0 &&
                    near(host.worst.ratio / host.worst.limit, device.worst.ratio / device.worst.limit);
  if (tie) *tie = tied;
  if (!tied) {
    same("worst granularity", host.worst.granularity == device.worst.granularity);
    same("worst block", host.worst.where == device.worst.where);
    same("worst ratio", near(host.worst.ratio, device.worst.ratio));
    same("worst limit", near(host.worst.limit, device.worst.limit));
    same("worst n", host.worst.n == device.worst.n);
    same("worst dof", host.worst.dof == device.worst.dof);
  }
  same("rms", near(host.err.rms, device.err.rms));
  same("max_abs", host.err.max_abs == device.err.max_abs);
  same("baseline rms", near(host.baseline.rms, device.baseline.rms));
  same("kappa", near(host.kappa, device.kappa));
  same("model rms", near(host.model_rms, device.model_rms));
  same("tensor ratio", near(host.tensor_ratio, device.tensor_ratio));
  same("bound rms", near(host.bound_rms, device.bound_rms));
  same("bound max", near(host.bound_max, device.bound_max));
  bool margins = host.margin.size() == device.margin.size();
  for (const auto& [g, m] : host.margin) margins = margins && device.margin.count(g) && near(m, device.margin.at(g));
  same("margins", margins);
  return out;
}

inline bool bitwise(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// One random judged tensor: a reference with copied and constant rows, baselines and a model
// with exact elements, skipped rows, rows of fewer dof, and an implementation whose error is
// the natural one times a random factor, with one of the planted shapes: a row scaled (an error
// along the row), an offset tile, an offset head, one large element, infinities where the
// reference has them or past the type's range, NaN (the host's path).
struct Draw {
  Tensor ref, impl, fwd, rev, sigma, row_dof;
  std::vector<uint8_t> skip;
  std::vector<std::pair<Contract, ErrorStats>> rungs;
  JudgeInput in;
  ToleranceRule rule;
  std::string planted;
};

inline Draw draw(uint64_t seed) {
  std::mt19937_64 g(seed);
  auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(g); };
  auto pick = [&](int n) { return static_cast<int>(g() % static_cast<uint64_t>(n)); };
  std::normal_distribution<double> normal;
  Draw d;
  const int64_t widths[] = {1, 3, 16, 40, 64, 128};
  const int64_t b = 1 + pick(2), h = 1 + pick(4), s = 1 + pick(90), w = widths[pick(6)];
  std::vector<int64_t> shape = {b, h, s};
  if (w > 1) shape.push_back(w);
  const int tiles[] = {16, 16, 16, 7, 1, 64};
  d.rule.tile = tiles[pick(6)];
  d.ref = Tensor(shape);
  const size_t rows = d.ref.numel() / static_cast<size_t>(w);
  for (size_t r = 0; r < rows; ++r) {
    const int kind = pick(10);
    for (int64_t e = 0; e < w; ++e) {
      double& x = d.ref.data[r * static_cast<size_t>(w) + static_cast<size_t>(e)];
      if (kind == 0 && r > 0)
        x = d.ref.data[(r - 1) * static_cast<size_t>(w) + static_cast<size_t>(e)];  // a copy of the row before
      else if (kind == 1)
        x = 0.5;  // constant
      else
        x = normal(g);
    }
  }
  const double natural = std::pow(10.0, uni(-6, -2));
  d.sigma = Tensor(shape);
  d.fwd = Tensor(shape), d.rev = Tensor(shape);
  for (size_t e = 0; e < d.ref.numel(); ++e) {
    const bool exact = pick(20) == 0;
    d.sigma.data[e] = exact ? 0.0 : natural * uni(0.2, 2.0);
    d.fwd.data[e] = d.ref.data[e] + (exact ? 0.0 : natural * normal(g));
    d.rev.data[e] = d.ref.data[e] + (exact ? 0.0 : natural * normal(g));
  }
  const double factor = std::pow(10.0, uni(-1, 0.8));
  d.impl = Tensor(shape);
  for (size_t e = 0; e < d.ref.numel(); ++e)
    d.impl.data[e] = d.ref.data[e] + (d.sigma.data[e] == 0 ? 0.0 : factor * natural * normal(g));
  const size_t row = static_cast<size_t>(pick(static_cast<int>(rows)));
  switch (pick(8)) {
    case 0: {
      d.planted = "row scaled";
      for (int64_t e = 0; e < w; ++e) d.impl.data[row * static_cast<size_t>(w) + static_cast<size_t>(e)] *= 1.0 + 3 * natural;
      break;
    }
    case 1: {
      d.planted = "tile offset";
      for (size_t r = row; r < std::min(rows, row + 16); ++r)
        for (int64_t e = 0; e < std::min<int64_t>(w, 16); ++e) d.impl.data[r * static_cast<size_t>(w) + static_cast<size_t>(e)] += 2 * natural;
      break;
    }
    case 2: {
      d.planted = "head offset";
      const size_t first = row / static_cast<size_t>(s) * static_cast<size_t>(s);
      for (size_t e = first * static_cast<size_t>(w); e < (first + static_cast<size_t>(s)) * static_cast<size_t>(w); ++e)
        d.impl.data[e] += natural;
      break;
    }
    case 3: {
      d.planted = "one element";
      d.impl.data[row * static_cast<size_t>(w)] += 30 * natural;
      break;
    }
    case 4: {
      d.planted = "infinities";
      const double inf = std::numeric_limits<double>::infinity();
      d.ref.data[row * static_cast<size_t>(w)] = d.impl.data[row * static_cast<size_t>(w)] = -inf;
      d.ref.data[0] = 70000.0, d.impl.data[0] = inf;  // past fp16's range
      d.in.overflow = 65520.0;
      break;
    }
    case 5: {
      d.planted = "NaN";
      d.impl.data[row * static_cast<size_t>(w)] = std::nan("");
      break;
    }
    default:
      d.planted = "none";
  }
  if (pick(3) > 0) {
    d.skip.resize(rows);
    for (auto& x : d.skip) x = pick(10) == 0;
  }
  if (pick(2) == 0) {
    d.row_dof = Tensor({b, h, s});
    for (double& x : d.row_dof.data) x = 1 + pick(static_cast<int>(w));
  }
  const bool with_model = pick(5) > 0, with_rev = pick(4) > 0;
  d.rungs = {{Contract::fp32, ErrorStats{}}, {Contract::bf16, ErrorStats{}}};
  d.rungs[0].second.rms = natural * uni(0.05, 0.5), d.rungs[0].second.max_abs = 10 * d.rungs[0].second.rms;
  d.rungs[1].second.rms = natural * uni(1, 4), d.rungs[1].second.max_abs = 10 * d.rungs[1].second.rms;
  d.in.impl = &d.impl;
  d.in.ref = &d.ref;
  d.in.baseline_fwd = &d.fwd;
  d.in.baseline_rev = with_rev ? &d.rev : nullptr;
  d.in.sigma = with_model ? &d.sigma : nullptr;
  d.in.skip_rows = d.skip.empty() ? nullptr : &d.skip;
  d.in.row_dof = d.row_dof.data.empty() ? nullptr : &d.row_dof;
  d.in.tiny = 1e-40;
  d.in.row_scale_variance = uni(0, 1e-12);
  d.in.rungs = pick(3) > 0 ? &d.rungs : nullptr;
  d.in.declared = Contract::bf16;
  d.in.coarsest_held = Contract::bf16;
  return d;
}

// Random cases judged twice, by the CPU oracle set with its own sums and with `reducer`'s: a
// contract baseline as the backend (which passes) and one that drops dLSE (which fails where a
// case has one). The findings must be the same, and every run's tensors the same verdicts.
struct CaseAgreement {
  int cases = 0, tensors = 0, findings = 0, disagree = 0, ties = 0;
  std::vector<std::string> failures;  // the first ten differences
};
inline CaseAgreement judge_random_cases(const std::function<std::unique_ptr<VerdictReducer>()>& reducer, int count) {
  struct DropsDlse final : Backend {
    EmulatedBackend inner{Contract::fp32, false};
    std::string name() const override { return "drops-dlse"; }
    std::optional<Contract> contract(DType) const override { return Contract::fp32; }
    Forward forward(const Problem& p) override { return inner.forward(p); }
    Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
      return inner.backward(p, f, d_out, Tensor(d_lse.shape));
    }
  };
  RandomCaseOptions opt;
  opt.max_seq = 96;
  opt.max_dim = 64;
  const OracleSet host = default_oracles();
  OracleSet reduced = host;
  reduced.verdict_reducer = reducer;
  CaseAgreement out;
  auto fail = [&](const std::string& what) {
    if (out.failures.size() < 10) out.failures.push_back(what);
  };
  for (int i = 0; i < count; ++i) {
    const Case c = random_case(27'500'000 + static_cast<uint64_t>(i), opt);
    EmulatedBackend baseline(Contract::bf16, true);
    DropsDlse drops;
    DiffOptions o;
    o.check_determinism = false;
    const DiffReport a = run_differential(c, {&baseline, &drops}, host, o);
    const DiffReport b = run_differential(c, {&baseline, &drops}, reduced, o);
    ++out.cases;
    out.findings += static_cast<int>(a.findings.size());
    bool same_findings = a.findings.size() == b.findings.size();
    for (size_t f = 0; same_findings && f < a.findings.size(); ++f) same_findings = a.findings[f].signature == b.findings[f].signature;
    if (!same_findings) {
      ++out.disagree;
      fail("case " + std::to_string(i) + ": other findings");
      continue;
    }
    for (size_t r = 0; r < a.runs.size() && r < b.runs.size(); ++r)
      for (size_t t = 0; t < a.runs[r].tensors.size() && t < b.runs[r].tensors.size(); ++t) {
        ++out.tensors;
        bool tie = false;
        const std::string diff = difference(a.runs[r].tensors[t], b.runs[r].tensors[t], &tie);
        out.ties += tie;
        if (diff.empty()) continue;
        ++out.disagree;
        fail("case " + std::to_string(i) + " run " + a.runs[r].backend + " " + a.runs[r].composition + " tensor " +
             std::string(to_string(a.runs[r].tensors[t].tensor)) + ": differs in" + diff);
      }
  }
  return out;
}

// What both tests hold of judge_random_cases: no difference but ties, and findings to compare.
inline void expect_cases_agree(const CaseAgreement& a) {
  for (const std::string& f : a.failures) ADD_FAILURE() << f;
  std::cout << "  " << a.cases << " cases, " << a.tensors << " judged tensors, " << a.findings << " findings, " << a.disagree
            << " disagreeing, " << a.ties << " worst blocks tied\n";
  EXPECT_EQ(a.disagree, 0);
  EXPECT_GE(a.findings, 5);
}

}  // namespace attnfuzz::verdict_test
