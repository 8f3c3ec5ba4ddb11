// The verdict's sensitivity on a small grid (bench/sensitivity measures the full one): for
// every output, planted error and dtype, the smallest flagged error is at most 8x the
// natural error of a correct kernel (mutant_ok), and the correct kernel itself passes.
#include <gtest/gtest.h>

#include <string>

#include "bench/sensitivity/sensitivity.h"
#include "backends/registry.h"

namespace attnfuzz {
namespace {

// The goal is 8x. Since rows are judged at their real number of independent errors
// (docs/verdicts.md, "Degrees of freedom of a row"), the relative-noise plant on dK at fp32,
// S = 16, D = 16 measures 8.35 (one bisection step, 2^(1/16), over 8): the limits of a small
// causal problem's few-source rows are wider. The test holds 8.5 so that any further
// regression fails; docs/verdicts.md lists every cell over 8.
constexpr double kGoal = 8.5;
// Where the measured threshold does not meet the goal (docs/verdicts.md, "Sensitivity"):
// an error confined to one row is judged by that row, whose limit c * (1 + k / sqrt(dof)) is
// 5.25 sigma' for D = 16 and 12 for one LSE element (a single draw fluctuates), and whose
// sigma' comes from naive baselines 2-3x less accurate than the tiled kernel.
constexpr double kRow = 32.0;

struct Grid {
  DType dtype;
  int64_t seq, dim;
};

// Below fp32 a row is also judged along itself (a projection, docs/verdicts.md): a scaled row of
// fp16 or bf16 is then held to the goal once the rows are long or many enough to average
// (S >= 64 here: 4.2-6.4 measured; 7.0-10.4 with the RMS statistic alone).
bool row_held_to_goal(const Grid& g, const SensitivityPoint& p) {
  return p.plant == Plant::row && p.tensor != "LSE" && g.dtype != DType::f32 && g.seq >= 64;
}

class Sensitivity : public ::testing::TestWithParam<Grid> {};

TEST_P(Sensitivity, ThresholdWithinGoalOfTheNaturalError) {
  const Grid g = GetParam();
  auto correct = make_backend(std::string("plugin:") + ATTNFUZZ_MUTANT_DIR + "/libattnfuzz_mutant_ok.so");
  SensitivityConfig cfg;
  cfg.dtype = g.dtype;
  cfg.seq = g.seq;
  cfg.dim = g.dim;
  for (const auto& p : measure_sensitivity(cfg, *correct, default_oracles())) {
    SCOPED_TRACE(p.tensor + " " + to_string(p.plant));
    EXPECT_TRUE(p.correct_passes) << "the correct kernel is flagged";
    ASSERT_GT(p.natural, 0.0);
    EXPECT_GT(p.threshold, 0.0) << "never flagged";
    EXPECT_LE(p.ratio(), p.plant == Plant::row && !row_held_to_goal(g, p) ? kRow : kGoal)
        << "threshold " << p.threshold << ", planted error " << p.planted << " " << p.moved << " vs natural " << p.natural;
  }
}

INSTANTIATE_TEST_SUITE_P(SmallGrid, Sensitivity,
                         ::testing::Values(Grid{DType::f32, 16, 16}, Grid{DType::f32, 64, 64}, Grid{DType::f16, 16, 16},
                                           Grid{DType::f16, 64, 64}, Grid{DType::bf16, 16, 16}, Grid{DType::bf16, 64, 64},
                                           Grid{DType::bf16, 64, 16}),
                         [](const auto& info) {
                           return std::string(to_string(info.param.dtype)) + "_S" + std::to_string(info.param.seq) + "_D" +
                                  std::to_string(info.param.dim);
                         });

// LibTorch's SDPA ops take no dLSE: the composition engine adds the dLSE term with two extra
// calls, and the baselines go through the same adapter. Baselines that counted the term twice
// would let a dQ or dK scaled by 1.14 (torch.sdpa.cpu_flash, bf16, S = D = 64: 79x its
// natural error) or a dLSE term dropped whole pass. The LSE plants are left out where
// the backend declares its LSE coarser than fp32 (cpu_flash: 2^-12 in fp16 and bf16), and with
// them the softmax scale, which moves the LSE most. Rows are held as above (fp32 rows to kRow).
struct NoDlseGrid {
  const char* backend;
  DType dtype;
};

class SensitivityWithoutDlse : public ::testing::TestWithParam<NoDlseGrid> {};

TEST_P(SensitivityWithoutDlse, GradientsThroughTheDlseAdapterWithinGoal) {
  const NoDlseGrid g = GetParam();
  auto backend = make_backend(g.backend);
  ASSERT_FALSE(backend->backward_takes_dlse());
  const bool coarse_lse = backend->lse_unit_roundoff(g.dtype) > unit_roundoff(DType::f32);
  SensitivityConfig cfg;
  cfg.dtype = g.dtype;
  cfg.seq = 64;
  cfg.dim = 64;
  for (const auto& p : measure_sensitivity(cfg, *backend, default_oracles())) {
    if (p.tensor == "LSE" || (coarse_lse && p.plant == Plant::softmax_scale)) continue;
    SCOPED_TRACE(p.tensor + " " + to_string(p.plant));
    EXPECT_TRUE(p.correct_passes) << "the correct backend is flagged";
    EXPECT_GT(p.threshold, 0.0) << "never flagged";
    const bool row_to_goal = row_held_to_goal(Grid{g.dtype, cfg.seq, cfg.dim}, p);
    EXPECT_LE(p.ratio(), p.plant == Plant::row && !row_to_goal ? kRow : kGoal)
        << "threshold " << p.threshold << ", planted error " << p.planted << " " << p.moved << " vs natural " << p.natural;
  }
}

INSTANTIATE_TEST_SUITE_P(LibTorch, SensitivityWithoutDlse,
                         ::testing::Values(NoDlseGrid{"torch.sdpa.cpu_flash", DType::bf16}, NoDlseGrid{"torch.sdpa.math", DType::f16},
                                           NoDlseGrid{"torch.sdpa.math", DType::f32}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.backend) + "_" + std::string(to_string(info.param.dtype));
                           for (char& ch : name)
                             if (ch == '.') ch = '_';
                           return name;
                         });

// Ragged batches and the decode step (bench_sensitivity --ragged [--seq-q N]; docs/verdicts.md,
// "Stop 57" and "Stop 60"): torch.math, the CPU backend that takes a ragged batch, is the correct
// kernel (the zoo's plugins take none). Its LSE is exact fp32, far below the model's floor, so the
// LSE plants are left out as above. 16-bit only: in fp32 a single query's rows read 9-47x (the
// rows' fp32 floor, docs/verdicts.md, "Stop 60"), a known gap, not a regression guard.
struct RaggedGrid {
  DType dtype;
  int64_t seq, seq_q, group;
};

class SensitivityOfRaggedBatches : public ::testing::TestWithParam<RaggedGrid> {};

TEST_P(SensitivityOfRaggedBatches, WithinGoalInsideTheFirstSequence) {
  const RaggedGrid g = GetParam();
  auto backend = make_backend("torch.math");
  SensitivityConfig cfg;
  cfg.dtype = g.dtype;
  cfg.seq = g.seq;
  cfg.seq_q = g.seq_q;
  cfg.group = g.group;
  cfg.dim = 64;
  cfg.ragged = true;
  for (const auto& p : measure_sensitivity(cfg, *backend, default_oracles())) {
    if (p.tensor == "LSE") continue;
    SCOPED_TRACE(p.tensor + " " + to_string(p.plant));
    EXPECT_TRUE(p.correct_passes) << "the correct backend is flagged";
    EXPECT_GT(p.threshold, 0.0) << "never flagged";
    EXPECT_LE(p.ratio(), p.plant == Plant::row ? kRow : kGoal)
        << "threshold " << p.threshold << ", planted error " << p.planted << " " << p.moved << " vs natural " << p.natural;
  }
}

INSTANTIATE_TEST_SUITE_P(TorchMath, SensitivityOfRaggedBatches,
                         ::testing::Values(RaggedGrid{DType::bf16, 64, 0, 1}, RaggedGrid{DType::f16, 64, 0, 1},
                                           RaggedGrid{DType::bf16, 256, 4, 4}, RaggedGrid{DType::f16, 256, 4, 4}),
                         [](const auto& info) {
                           return std::string(to_string(info.param.dtype)) + "_S" + std::to_string(info.param.seq) +
                                  (info.param.seq_q ? "_decode" + std::to_string(info.param.seq_q) : std::string("_ragged"));
                         });

}  // namespace
}  // namespace attnfuzz
