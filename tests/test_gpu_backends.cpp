// The LibTorch CUDA backends against the float64 reference on random cases (label gpu).
// Without a GPU (or with a CPU-only LibTorch) each test is reported as skipped, with the reason.
#include <gtest/gtest.h>

#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/differential.h"
#include "oracles/registry.h"

namespace attnfuzz {
namespace {

class GpuBackend : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuBackend, NoFindingOnRandomCases) {
  std::unique_ptr<Backend> be;
  try {
    be = make_backend(GetParam());
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  for (uint64_t seed = 0; seed < 300; ++seed) {
    RandomCaseOptions opt;
    opt.max_seq = 64;
    const Case c = random_case(seed + 5'000'000, opt);
    const DiffReport r = run_differential(c, {be.get()}, default_oracles());
    for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail << "\n" << write_case(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Torch, GpuBackend, ::testing::Values("torch.f64.cuda", "torch.math.cuda", "torch.sdpa.math.cuda"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '.') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace attnfuzz
