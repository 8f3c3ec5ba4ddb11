// judge_tensor from a reducer's sums (harness/verdict.h, VerdictReducer) against its own sums
// over elements. The reducer here computes, on the host, what oracles/gpu_verdict.h says the
// GPU's does (per row, per tile, totals over rows), so that the code turning such sums into
// blocks, dof, limits and worst blocks is held to the element path on every machine;
// tests/test_gpu_verdict.cpp holds the GPU's sums the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <unordered_set>

#include "harness/metrics.h"
#include "harness/verdict.h"
#include "tests/verdict_draws.h"

namespace attnfuzz {
namespace {

class HostSums final : public VerdictReducer {
 public:
  ErrorStats compare(const Tensor& a, const Tensor& ref, const std::vector<uint8_t>* skip_rows, double overflow) override {
    return attnfuzz::compare(a, ref, skip_rows, overflow);
  }

  std::optional<VerdictSums> sums(const JudgeInput& in, const ToleranceRule& rule) override {
    const Tensor& ref = *in.ref;
    const int64_t width = ref.shape.size() > 3 ? ref.shape[3] : 1, seq = ref.shape[2], tile = std::max<int64_t>(1, rule.tile);
    const int64_t rows = static_cast<int64_t>(ref.numel()) / width;
    const Tensor* row_dof = in.row_dof && !in.row_dof->data.empty() ? in.row_dof : nullptr;
    VerdictSums v;
    v.err = attnfuzz::compare(*in.impl, ref, in.skip_rows, in.overflow);
    if (v.err.nonfinite_mismatch) return std::nullopt;
    if (in.baseline_fwd) v.baseline_fwd = attnfuzz::compare(*in.baseline_fwd, ref, in.skip_rows, in.overflow);
    if (in.baseline_rev) v.baseline_rev = attnfuzz::compare(*in.baseline_rev, ref, in.skip_rows, in.overflow);
    auto skipped = [&](int64_t row) { return in.skip_rows && (*in.skip_rows)[static_cast<size_t>(row)]; };
    struct Element {
      bool used = false, exact = false;
      double ref = 0, err = 0, err2 = 0, base2 = 0, model = 0, allow2 = 0;
    };
    auto element = [&](size_t e, double k) {
      Element t;
      const double r = ref.data[e], a = in.impl->data[e];
      if (!std::isfinite(r) || !std::isfinite(a)) return t;
      t.used = true, t.ref = r, t.err = a - r, t.err2 = (a - r) * (a - r);
      auto sq = [&](const Tensor* b) { return b && std::isfinite(b->data[e]) ? (b->data[e] - r) * (b->data[e] - r) : 0.0; };
      t.base2 = (sq(in.baseline_fwd) + sq(in.baseline_rev)) / 2.0;
      t.model = in.sigma ? in.sigma->data[e] : 0.0;
      const double allow = std::sqrt(std::max(k * k * t.model * t.model, t.base2)) + in.tiny;
      t.allow2 = allow * allow;
      t.exact = t.model == 0 && t.base2 == 0;
      return t;
    };
    double base2 = 0, model2 = 0, used = 0;
    for (int64_t row = 0; row < rows; ++row) {
      double rb = 0, rm = 0, ru = 0;
      if (!skipped(row))
        for (int64_t d = 0; d < width; ++d) {
          const Element t = element(static_cast<size_t>(row * width + d), 0);
          if (!t.used) continue;
          ru += 1, rb += t.base2, rm += t.model * t.model;
        }
      base2 += rb, model2 += rm, used += ru;
    }
    v.kappa = model2 > 0 ? std::sqrt(base2 / model2) : 0.0;
    v.model_rms = used > 0 ? std::sqrt(model2 / used) : 0.0;
    const double k = std::max(v.kappa, rule.kappa_min);
    v.rows.resize(static_cast<size_t>(rows));
    for (int64_t row = 0; row < rows; ++row) {
      RowSums& r = v.rows[static_cast<size_t>(row)];
      uint64_t h = 1469598103934665603ull;
      double along = 0, independent = 0, p_allow2 = 0, p_ref2 = 0, p_can = 0;
      for (int64_t d = 0; d < width; ++d) {
        const size_t e = static_cast<size_t>(row * width + d);
        uint64_t bits;
        std::memcpy(&bits, &ref.data[e], sizeof bits);
        h = (h ^ bits) * 1099511628211ull;
        if (skipped(row)) continue;
        const Element t = element(e, k);
        if (!t.used) continue;
        if (t.err2 > r.max_err2) r.max_err2 = t.err2, r.allow2_at_max = t.allow2;
        r.err2 += t.err2, r.allow2 += t.allow2, r.n += 1;
        if (t.exact) continue;
        r.can_err += 1;
        along += t.err * t.ref, independent += t.allow2 * t.ref * t.ref, p_allow2 += t.allow2, p_ref2 += t.ref * t.ref, p_can += 1;
      }
      r.hash = h;
      if (p_can != 0 && p_allow2 < p_ref2) {
        const double dof = std::max(1.0, row_dof ? std::min(p_can, row_dof->data[static_cast<size_t>(row)]) : p_can);
        r.along_err2 = along * along;
        r.along_allow2 = std::max(independent, p_allow2 * p_ref2 / dof) + in.row_scale_variance * p_ref2 * p_ref2;
        r.along_n = p_can, r.along_dof = 1;
      }
    }
    for (int64_t head = 0; head < rows / seq; ++head)
      for (int64_t s0 = 0; s0 < seq; s0 += tile)
        for (int64_t d0 = 0; d0 < width; d0 += tile) {
          TileSums t;
          std::unordered_set<uint64_t> seen;
          for (int64_t s = s0; s < std::min(seq, s0 + tile); ++s) {
            const int64_t row = head * seq + s;
            double in_row = 0, can_err = 0;
            if (!skipped(row))
              for (int64_t d = d0; d < std::min(width, d0 + tile); ++d) {
                const Element x = element(static_cast<size_t>(row * width + d), k);
                if (!x.used) continue;
                t.err2 += x.err2, t.allow2 += x.allow2, in_row += 1, can_err += x.exact ? 0 : 1;
              }
            t.n += in_row;
            if (can_err == 0) continue;
            if (seen.insert(v.rows[static_cast<size_t>(row)].hash).second)
              t.dof += row_dof ? std::min(can_err, row_dof->data[static_cast<size_t>(row)]) : can_err;
          }
          v.tiles.push_back(t);
        }
    return v;
  }
};

TEST(VerdictSums, JudgeTheSameAsTheElementsOnRandomTensors) {
  int failing = 0, disagree = 0;
  for (uint64_t i = 0; i < 400; ++i) {
    const verdict_test::Draw d = verdict_test::draw(27'000 + i);
    HostSums sums;
    const TensorVerdict host = judge_tensor(TensorId::O, d.in, d.rule);
    const TensorVerdict reduced = judge_tensor(TensorId::O, d.in, d.rule, &sums);
    failing += !host.pass;
    const std::string diff = verdict_test::difference(host, reduced);
    if (!diff.empty() && ++disagree <= 10)
      ADD_FAILURE() << "draw " << i << " (" << d.planted << ", tile " << d.rule.tile << "): differs in" << diff << "; host "
                    << host.worst.granularity_name() << " " << host.worst.where << " " << host.worst.ratio << ", from sums "
                    << reduced.worst.granularity_name() << " " << reduced.worst.where << " " << reduced.worst.ratio;
  }
  std::cout << "  400 tensors, " << failing << " failing, " << disagree << " disagreeing\n";
  EXPECT_EQ(disagree, 0);
  EXPECT_GE(failing, 80);
  EXPECT_LE(failing, 320);
}

// Whole cases (tests/verdict_draws.h, judge_random_cases), as tests/test_gpu_verdict.cpp runs them
// with the GPU's sums.
TEST(VerdictSums, JudgeRandomCasesAsTheElementsDo) {
  verdict_test::expect_cases_agree(verdict_test::judge_random_cases([] { return std::make_unique<HostSums>(); }, 40));
}

}  // namespace
}  // namespace attnfuzz
