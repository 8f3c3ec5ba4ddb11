// The LibTorch CUDA backends against the float64 reference on random cases, with and without a
// score bias, and dBias where LibTorch returns it (label gpu).
// Without a GPU (or with a CPU-only LibTorch) each test is reported as skipped, with the reason.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "generators/envelope_cases.h"
#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "harness/inputs.h"
#include "backends/registry.h"
#include "backends/torch_sdpa_cuda.h"
#include "oracles/emulated.h"
#include "tests/dbias_check.h"

namespace attnfuzz {
namespace {

// A backend name as a gtest parameter name (no dots).
std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (ch == '.') ch = '_';
  return n;
}

// `p_bias`: the share of the cases with a score bias (random_bias's; its own draw stream).
void expect_no_finding(Backend* be, double p_bias, int min_ran) {
  int ran = 0;
  std::map<std::string, int> skip_reasons;
  // Fused kernels refuse much of the random mix (fp32, arbitrary masks, head dims), so cases
  // are drawn until 150 ran or 2000 were tried.
  uint64_t tried = 0;
  for (uint64_t seed = 0; seed < 2000 && ran < 150; ++seed, ++tried) {
    RandomCaseOptions opt;
    opt.max_seq = 64;
    opt.p_bias = p_bias;
    Case c = random_case(seed + 5'000'000, opt);
    // Packed tensors: LibTorch's flash kernel faults on unaligned rows (known deviation F-2,
    // docs/findings), which ends the test at its first GPU error; campaigns cover the layouts
    // with --known docs/findings/repro.
    c.layouts = Layouts{};
    DiffOptions dopt;
    dopt.gpu_health = gpu_health;
    const DiffReport r = run_differential(c, {be}, default_oracles(), dopt);
    for (const auto& run : r.runs) {
      if (run.skipped)
        ++skip_reasons[run.skip_reason.substr(0, 160)];
      else
        ++ran;
    }
    for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail << "\n" << write_case(c);
    if (r.gpu_error) {
      ADD_FAILURE() << "stopped after a GPU error (the CUDA context may be unusable); case seed " << c.seed;
      break;
    }
  }
  for (const auto& [why, n] : skip_reasons) std::cout << "  skipped " << n << "x: " << why << "\n";
  std::cout << "  ran " << ran << " backend runs over " << tried << " cases\n";
  // A backend that refused nearly everything would make this test pass without testing anything.
  EXPECT_GE(ran, min_ran) << be->name() << " ran too few cases to say anything";
}

class GpuBackend : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuBackend, NoFindingOnRandomCases) {
  std::unique_ptr<Backend> be;
  try {
    be = make_backend(GetParam());
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  expect_no_finding(be.get(), 0.0, 30);
}

INSTANTIATE_TEST_SUITE_P(Torch, GpuBackend,
                         ::testing::Values("torch.f64.cuda", "torch.math.cuda", "torch.sdpa.math.cuda", "torch.flash", "torch.sdpa.flash",
                                           "torch.efficient", "torch.sdpa.efficient",
                                           // Fails on LibTorch 2.11: docs/findings/ (cuDNN, unaligned rows).
                                           "torch.cudnn", "torch.sdpa.cudnn"),
                         backend_param_name);

// Every case with a score bias, which LibTorch's efficient and cuDNN kernels take as a float
// attn_mask (backends/torch_sdpa_cuda.cpp); flash takes none and declines it by its envelope.
class GpuBackendWithABias : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuBackendWithABias, NoFindingOnRandomCasesWithABias) {
  std::unique_ptr<Backend> be;
  try {
    be = make_backend(GetParam());
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  EXPECT_TRUE(be->envelope().bias);
  expect_no_finding(be.get(), 1.0, 20);
}

INSTANTIATE_TEST_SUITE_P(Torch, GpuBackendWithABias,
                         ::testing::Values("torch.f64.cuda", "torch.math.cuda", "torch.efficient", "torch.sdpa.efficient", "torch.cudnn",
                                           "torch.sdpa.cudnn"),
                         backend_param_name);

// Runs everywhere (an envelope needs no GPU).
TEST(GpuBackendBias, FlashDeclinesABias) {
  for (CudaSdpaEntry entry : {CudaSdpaEntry::op, CudaSdpaEntry::public_api})
    for (CudaSdpaKernel k : {CudaSdpaKernel::flash, CudaSdpaKernel::efficient, CudaSdpaKernel::cudnn}) {
      const auto be = make_torch_cuda_sdpa_backend(k, entry);
      EXPECT_EQ(be->envelope().bias, k != CudaSdpaKernel::flash) << be->name();
    }
}

// dBias (a bias that requires a gradient), which LibTorch 2.11 computes through the efficient
// kernel only (backends/torch_sdpa_cuda.cpp, bias_grad_support): every broadcast shape that spans
// the keys, over masks, fp16 and bf16, against the float64 reference within 8 u M
// (tests/dbias_check.h says why).
class GpuBackendDbias : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuBackendDbias, MatchesTheReference) {
  std::unique_ptr<Backend> be;
  try {
    be = make_backend(GetParam());
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  ASSERT_TRUE(be->envelope().bias_grad);
  for (DType d : {DType::f16, DType::bf16})
    for (const auto& dc : dbias_test::dbias_cases(d, false)) dbias_test::expect_dbias_matches_reference(*be, dc);
}

INSTANTIATE_TEST_SUITE_P(Torch, GpuBackendDbias, ::testing::Values("torch.efficient", "torch.sdpa.efficient"), backend_param_name);

// The fp16 or bf16 contract baseline (oracles/emulated.cpp: 16-bit operands, float32
// accumulation, dBias summed at float32 and stored once) as a backend that returns dBias, and
// optionally with a planted fault: dBias averaged over the broadcast dimensions, not summed.
class BaselineWithDbias final : public Backend {
 public:
  BaselineWithDbias(DType d, bool averaged) : inner_(natural_contract(d), false), averaged_(averaged) {}
  std::string name() const override { return averaged_ ? "baseline.dbias_averaged" : "baseline"; }
  SupportEnvelope envelope() const override {
    SupportEnvelope e = inner_.envelope();
    e.bias_grad = true;
    return e;
  }
  Forward forward(const Problem& p) override { return inner_.forward(p); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    Gradients g = inner_.backward(p, f, d_out, d_lse);
    if (averaged_) {
      const double n = static_cast<double>(p.shape.batch * p.shape.heads_q * p.shape.seq_q * p.shape.seq_kv) / static_cast<double>(p.bias.numel());
      for (double& x : g.dbias.data) x = round_to(p.dtype, x / n);
    }
    return g;
  }

 private:
  EmulatedBackend inner_;
  bool averaged_;
};

// Runs everywhere: the check of tests/dbias_check.h holds what a correct 16-bit kernel computes
// (the contract baseline passes on every case) and catches a structural fault (dBias averaged
// over the broadcast instead of summed).
TEST(DbiasCheck, PassesTheContractBaselineAndCatchesAPlantedFault) {
  for (DType d : {DType::f16, DType::bf16})
    for (const auto& dc : dbias_test::dbias_cases(d, true)) {
      BaselineWithDbias good(d, false);
      dbias_test::expect_dbias_matches_reference(good, dc);
      if (dc.c.bias->spans == std::array<bool, 4>{true, true, true, true}) continue;  // nothing broadcast: averaging is summing
      BaselineWithDbias averaged(d, true);
      EXPECT_NONFATAL_FAILURE(dbias_test::expect_dbias_matches_reference(averaged, dc), "over 8 u M");
    }
}

// Runs everywhere (an envelope needs no GPU): the efficient kernel returns dBias through either
// entry point; flash (no bias) and cuDNN (LibTorch 2.11 has no attn_bias gradient for it) decline
// a bias that requires a gradient by their envelope, with a reason, before anything runs.
TEST(GpuBackendBias, OnlyEfficientReturnsDbias) {
  const Case c = dbias_test::dbias_case(47, {1, 2, 2, 16, 24, 64, 64}, DType::f16, {false, true, true, true}, MaskExpr::all_visible());
  Problem p = full_problem(c, generate_inputs(c));
  p.bias_requires_grad = true;
  for (CudaSdpaEntry entry : {CudaSdpaEntry::op, CudaSdpaEntry::public_api})
    for (CudaSdpaKernel k : {CudaSdpaKernel::flash, CudaSdpaKernel::efficient, CudaSdpaKernel::cudnn}) {
      const auto be = make_torch_cuda_sdpa_backend(k, entry);
      const SupportEnvelope e = be->envelope();
      EXPECT_EQ(e.bias_grad, k == CudaSdpaKernel::efficient) << be->name();
      const std::optional<std::string> why = e.refusal(p);
      if (k == CudaSdpaKernel::efficient) {
        EXPECT_FALSE(why.has_value()) << be->name() << ": " << why.value_or("");
      } else {
        ASSERT_TRUE(why.has_value()) << be->name();
        EXPECT_NE(why->find(k == CudaSdpaKernel::flash ? "score bias" : "requires a gradient"), std::string::npos) << be->name() << ": " << *why;
      }
    }
}

// On a GPU: LibTorch's cuDNN kernel, handed a case whose bias requires a gradient, refuses it with
// the reason (its unsupported_reason, and a composition throws UnsupportedError) instead of
// running a backward that would return no dBias. The bias spans the keys: a float mask
// broadcast over them faults this kernel (s47-torch-cudnn-float-mask-broadcast-kv).
TEST(GpuBackendBias, TorchCudnnDeclinesDbiasWithTheReason) {
  const Case c = dbias_test::dbias_case(48, {2, 2, 2, 32, 64, 64, 64}, DType::bf16, {false, true, true, true}, MaskExpr::all_visible());
  const Inputs in = generate_inputs(c);
  Problem p = full_problem(c, in);
  p.bias_requires_grad = true;
  for (const char* name : {"torch.cudnn", "torch.sdpa.cudnn"}) {
    std::unique_ptr<Backend> be;
    try {
      be = make_backend(name);
    } catch (const std::exception& e) {
      GTEST_SKIP() << e.what();
    }
    const std::optional<std::string> why = be->unsupported_reason(p);
    ASSERT_TRUE(why.has_value()) << name;
    EXPECT_NE(why->find("requires a gradient"), std::string::npos) << name << ": " << *why;
    EXPECT_EQ(why->find('\n'), std::string::npos) << *why;
    EXPECT_THROW(run_composition(*be, c, in, Composition{}), UnsupportedError) << name;
  }
}

// The envelope a fused backend declares is what its library takes (harness/envelope.h): of the
// cases aimed inside it (generators/envelope_cases.h, the small tier), nearly all are accepted.
// A library that refuses more than a few says its envelope declares too much.
class FusedEnvelope : public ::testing::TestWithParam<std::string> {};

TEST_P(FusedEnvelope, AcceptsTheCasesAimedInsideIt) {
  std::unique_ptr<Backend> be;
  try {
    be = make_backend(GetParam());
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  CaseMix mix;
  mix.gen = RandomCaseOptions::for_tier(domain::SizeTier::small);
  mix.targets = {{be->name(), be->envelope(), be->on_gpu()}};
  mix.edge_share = 0.0;
  int accepted = 0;
  const int n = 200;
  std::map<std::string, int> refusals;
  for (uint64_t g = 0; g < static_cast<uint64_t>(n); ++g) {
    const Case c = aimed_campaign_case(11, g, mix).c;
    const Problem p = full_problem(c, generate_inputs(c));
    if (const auto why = be->unsupported_reason(p))
      ++refusals[why->substr(0, 160)];
    else
      ++accepted;
  }
  for (const auto& [why, k] : refusals) std::cout << "  refused " << k << "x: " << why << "\n";
  EXPECT_GE(accepted, n * 9 / 10) << GetParam() << " accepted " << accepted << " of " << n << " cases inside its envelope";
}

INSTANTIATE_TEST_SUITE_P(Fused, FusedEnvelope, ::testing::ValuesIn(std::vector<std::string>(std::begin(kFusedGpuBackends), std::end(kFusedGpuBackends))),
                         backend_param_name);

}  // namespace
}  // namespace attnfuzz
