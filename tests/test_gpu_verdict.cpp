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
  int judged = 0, failing = 0, disagree = 0, ties = 0;
  std::map<Granularity, int> worst_at;
  for (uint64_t i = 0; i < 400; ++i) {
    const Draw d = draw(27'000 + i);
    const auto reducer = make_cuda_verdict_reducer();
    const TensorVerdict host = judge_tensor(TensorId::O, d.in, d.rule);
    const TensorVerdict device = judge_tensor(TensorId::O, d.in, d.rule, reducer.get());
    bool tie = false;
    const std::string diff = difference(host, device, &tie);
    ties += tie;
    ++judged;
    failing += !host.pass;
    if (host.worst.granularity) ++worst_at[*host.worst.granularity];
    if (!diff.empty() && ++disagree <= 10)
      ADD_FAILURE() << "draw " << i << " (" << d.planted << ", shape " << d.ref.shape.size() << "-d, tile " << d.rule.tile
                    << "): differs in" << diff << "; host " << (host.pass ? "pass" : "fail") << " " << host.worst.granularity_name() << " "
                    << host.worst.where << " " << host.worst.ratio << ", device " << device.worst.granularity_name() << " "
                    << device.worst.where << " " << device.worst.ratio;
  }
  std::cout << "  " << judged << " tensors, " << failing << " failing on the host, " << disagree << " disagreeing, " << ties
            << " worst blocks tied; worst blocks:";
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

// Whole cases (tests/verdict_draws.h, judge_random_cases): the same findings, and every run's
// tensors the same verdicts.
TEST(GpuVerdict, JudgesRandomCasesAsTheHostDoes) {
  REQUIRE_GPU();
  verdict_test::expect_cases_agree(verdict_test::judge_random_cases(make_cuda_verdict_reducer, 40));
}

}  // namespace
}  // namespace attnfuzz
