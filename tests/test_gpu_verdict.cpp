// The verdict's sums on the GPU (oracles/gpu_verdict.cu, label gpu) against the host's, the
// reference implementation (harness/verdict.cpp): on a few hundred random judged tensors with
// planted errors of every shape, and on random cases end to end. The same pass, class,
// fingerprint and worst block every time; every statistic within kRelative of the host's (the
// sums over a head, the tensor and kappa run in another order: docs/gpu.md, "The verdict on the
// GPU"); and the same bits when judged twice. Without a usable GPU the tests report themselves
// skipped, with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "generators/random_case.h"
#include "harness/differential.h"
#include "oracles/emulated.h"
#include "oracles/gpu_oracles.h"
#include "tests/gpu_test_util.h"
#include "tests/verdict_draws.h"

namespace attnfuzz {
namespace {

using verdict_test::bitwise;
using verdict_test::difference;
using verdict_test::Draw;
using verdict_test::draw;

TEST(GpuVerdict, AgreesWithTheHostOnRandomTensors) {
  REQUIRE_GPU();
  int judged = 0, failing = 0, disagree = 0;
  std::map<Granularity, int> worst_at;
  for (uint64_t i = 0; i < 400; ++i) {
    const Draw d = draw(27'000 + i);
    const auto reducer = make_cuda_verdict_reducer();
    const TensorVerdict host = judge_tensor(TensorId::O, d.in, d.rule);
    const TensorVerdict device = judge_tensor(TensorId::O, d.in, d.rule, reducer.get());
    const std::string diff = difference(host, device);
    ++judged;
    failing += !host.pass;
    if (host.worst.granularity) ++worst_at[*host.worst.granularity];
    if (!diff.empty() && ++disagree <= 10)
      ADD_FAILURE() << "draw " << i << " (" << d.planted << ", shape " << d.ref.shape.size() << "-d, tile " << d.rule.tile
                    << "): differs in" << diff << "; host " << (host.pass ? "pass" : "fail") << " " << host.worst.granularity_name() << " "
                    << host.worst.where << " " << host.worst.ratio << ", device " << device.worst.granularity_name() << " "
                    << device.worst.where << " " << device.worst.ratio;
  }
  std::cout << "  " << judged << " tensors, " << failing << " failing on the host, " << disagree << " disagreeing; worst blocks:";
  for (const auto& [g, n] : worst_at) std::cout << " " << to_string(g) << " " << n;
  std::cout << "\n";
  EXPECT_EQ(disagree, 0);
  // Not vacuous: both verdicts, and worst blocks at every granularity the draw reaches.
  EXPECT_GE(failing, 80);
  EXPECT_GE(judged - failing, 80);
  for (Granularity g : {Granularity::element, Granularity::row, Granularity::row_along_itself, Granularity::tile, Granularity::head,
                        Granularity::tensor})
    EXPECT_GE(worst_at[g], 3) << to_string(g);
}

TEST(GpuVerdict, GivesTheSameBitsTwice) {
  REQUIRE_GPU();
  for (uint64_t i = 0; i < 40; ++i) {
    const Draw d = draw(28'000 + i);
    const auto first = make_cuda_verdict_reducer(), second = make_cuda_verdict_reducer();
    const TensorVerdict a = judge_tensor(TensorId::dK, d.in, d.rule, first.get());
    const TensorVerdict b = judge_tensor(TensorId::dK, d.in, d.rule, second.get());
    const TensorVerdict c = judge_tensor(TensorId::dK, d.in, d.rule, first.get());  // from the tensors it kept
    for (const TensorVerdict* x : {&b, &c}) {
      EXPECT_TRUE(bitwise(a.err.rms, x->err.rms) && bitwise(a.kappa, x->kappa) && bitwise(a.tensor_ratio, x->tensor_ratio) &&
                  bitwise(a.bound_rms, x->bound_rms) && bitwise(a.worst.ratio, x->worst.ratio) && a.worst.where == x->worst.where)
          << "draw " << i;
      for (const auto& [g, m] : a.margin) EXPECT_TRUE(x->margin.count(g) && bitwise(m, x->margin.at(g))) << "draw " << i;
    }
  }
}

// A tensor the reducer kept, changed in place against the contract, is seen as changed.
TEST(GpuVerdict, UploadsAKeptTensorAgainWhenItChanged) {
  REQUIRE_GPU();
  Draw d = draw(29'000);
  const auto reducer = make_cuda_verdict_reducer();
  const TensorVerdict before = judge_tensor(TensorId::O, d.in, d.rule, reducer.get());
  for (double& x : d.ref.data) x += 1.0;
  for (double& x : d.impl.data) x += 1.0;
  for (double& x : d.fwd.data) x += 1.0;
  for (double& x : d.rev.data) x += 1.0;
  const TensorVerdict host = judge_tensor(TensorId::O, d.in, d.rule);
  const TensorVerdict device = judge_tensor(TensorId::O, d.in, d.rule, reducer.get());
  EXPECT_EQ(difference(host, device), "");
  (void)before;
}

// Whole cases: the CPU oracle set judging a contract baseline (which passes) and one that drops
// dLSE (which fails where a case has one), host sums against device sums. The same findings,
// and every run's tensors the same verdicts.
TEST(GpuVerdict, JudgesRandomCasesAsTheHostDoes) {
  REQUIRE_GPU();
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
  OracleSet device = host;
  device.verdict_reducer = make_cuda_verdict_reducer;
  int cases = 0, findings = 0, runs = 0, disagree = 0;
  for (uint64_t i = 0; i < 40; ++i) {
    const Case c = random_case(27'500'000 + i, opt);
    EmulatedBackend baseline(Contract::bf16, true);
    DropsDlse drops;
    DiffOptions o;
    o.check_determinism = false;
    const DiffReport a = run_differential(c, {&baseline, &drops}, host, o);
    const DiffReport b = run_differential(c, {&baseline, &drops}, device, o);
    ++cases;
    findings += static_cast<int>(a.findings.size());
    ASSERT_EQ(a.findings.size(), b.findings.size()) << "case " << i;
    for (size_t f = 0; f < a.findings.size(); ++f) EXPECT_EQ(a.findings[f].signature, b.findings[f].signature) << "case " << i;
    ASSERT_EQ(a.runs.size(), b.runs.size());
    for (size_t r = 0; r < a.runs.size(); ++r) {
      ASSERT_EQ(a.runs[r].tensors.size(), b.runs[r].tensors.size());
      for (size_t t = 0; t < a.runs[r].tensors.size(); ++t) {
        ++runs;
        const std::string diff = difference(a.runs[r].tensors[t], b.runs[r].tensors[t]);
        if (!diff.empty() && ++disagree <= 10)
          ADD_FAILURE() << "case " << i << " run " << a.runs[r].backend << " " << a.runs[r].composition << " tensor "
                        << to_string(a.runs[r].tensors[t].tensor) << ": differs in" << diff;
      }
    }
  }
  std::cout << "  " << cases << " cases, " << runs << " judged tensors, " << findings << " findings, " << disagree << " disagreeing\n";
  EXPECT_EQ(disagree, 0);
  EXPECT_GE(findings, 5);
}

}  // namespace
}  // namespace attnfuzz
