// LibTorch's varlen ops (backends/torch_varlen_cuda.h: torch.flash.varlen, torch.efficient.varlen)
// against the float64 reference on random ragged batches, through the same differential path as
// tests/test_gpu_backends.cpp; a planted fault in their output must be flagged; a mask or layout
// the ops cannot take is declined with a one-line reason (label gpu). The GPU tests skip, visibly
// and with the reason, without a GPU or a CUDA LibTorch; the tests of the adapter's own refusals
// (host code) run everywhere.
#include <gtest/gtest.h>

#include <iostream>

#include "backends/registry.h"
#include "backends/torch_varlen_cuda.h"
#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "harness/inputs.h"
#include "tests/backend_test_util.h"
#include "tests/varlen_test_util.h"

namespace attnfuzz {
namespace {

using test::backend_param_name;
using test::problem_of;
using test::ragged_of;

const char* const kVarlenBackends[] = {"torch.flash.varlen", "torch.efficient.varlen"};

TorchVarlenOp op_of(const std::string& name) { return name == "torch.flash.varlen" ? TorchVarlenOp::flash : TorchVarlenOp::efficient; }

// The cases the ops are for: a ragged batch in every case (gaps between the sequences and a tail
// in some, sequences of 0 and 1 queries or keys among them: generators/random_case.cpp,
// random_ragged), fp16 or bf16, no mask or the causal mask aligned to each sequence's
// bottom-right corner, no softcap, small sizes; GQA, Dqk != Dv, dLSE and a quarter with a
// composition as random_case draws them.
Case varlen_case(uint64_t seed) {
  RandomCaseOptions opt;
  opt.max_seq = 64;
  opt.p_ragged = 1.0;
  opt.p_softcap = 0.0;
  opt.p_composition = 0.25;
  opt.dtypes = {DType::f16, DType::bf16};
  Case c = random_case(seed + 7'000'000, opt);
  c.mask = seed % 2 ? MaskExpr::causal_mask(Align::bottom_right) : MaskExpr::all_visible();
  // Head dims that are multiples of 8, as the efficient op needs (flash pads its own).
  c.shape.head_dim_qk = (c.shape.head_dim_qk + 7) / 8 * 8;
  c.shape.head_dim_v = (c.shape.head_dim_v + 7) / 8 * 8;
  // Misaligned buffers end the process's CUDA context with a sticky fault in both ops (stop 57,
  // docs/findings/LEDGER.md): campaigns' isolated workers meet them, this process cannot.
  c.ragged->misaligned = false;
  return c;
}
constexpr int kCases = 300;

// A stand-in with the backend's envelope and the adapter's own refusals (torch_varlen_refusal),
// whose forward and backward return zeros: with it the composition engine says, without a GPU,
// which runs the adapter accepts.
class RefusalProbe final : public test::ZeroProbe {
 public:
  explicit RefusalProbe(TorchVarlenOp op) : ZeroProbe(make_torch_varlen_backend(op)), op_(op) {}
  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    if (auto why = envelope().refusal(p)) return why;
    return torch_varlen_refusal(op_, p);
  }

 private:
  TorchVarlenOp op_;
};

// Runs everywhere: of the runs the GPU test makes, the adapter's own checks (Q gaps, masks,
// head dims, known library bugs) accept more than half for flash, and more than 40% for efficient,
// whose known bugs (more queries than keys under causal bottom-right, a sequence with no key in a
// call) take the test's edge lengths (0 and 1) and key splits: the GPU test still judges hundreds.
TEST(VarlenRefusal, AcceptsMostOfTheTestsRaggedCases) {
  for (const char* name : kVarlenBackends) {
    RefusalProbe probe(op_of(name));
    const test::Acceptance a = test::accepted_runs(probe, varlen_case, kCases, "the adapter accepts");
    const int percent = op_of(name) == TorchVarlenOp::flash ? 50 : 40;
    EXPECT_GT(a.accepted * 100, a.runs * percent) << name;
  }
}

void expect_declined(TorchVarlenOp op, const Problem& p, const std::string& says) {
  const auto why = torch_varlen_refusal(op, p);
  ASSERT_TRUE(why.has_value()) << says;
  EXPECT_NE(why->find(says), std::string::npos) << *why;
  EXPECT_EQ(why->find('\n'), std::string::npos) << *why;
  EXPECT_LT(why->size(), 400u) << *why;
}

// Runs everywhere: what the adapter itself accepts and declines, and why.
TEST(VarlenRefusal, AcceptsWhatTheOpsComputeAndDeclinesTheRest) {
  const Shape s{3, 4, 2, 40, 56, 64, 64};
  const Ragged lens = ragged_of({40, 0, 17}, {9, 56, 30}, 0, 5, 11);
  // Every sequence's own bottom-right diagonal, K and V with gaps, a tail, an empty sequence;
  // efficient declines it where a sequence has more queries than keys (sequence 0: a known bug).
  EXPECT_FALSE(torch_varlen_refusal(TorchVarlenOp::flash, problem_of(s, MaskExpr::causal_mask(Align::bottom_right), lens)));
  expect_declined(TorchVarlenOp::efficient, problem_of(s, MaskExpr::causal_mask(Align::bottom_right), lens), "PR 193632");
  EXPECT_FALSE(torch_varlen_refusal(TorchVarlenOp::efficient,
                                    problem_of(s, MaskExpr::causal_mask(Align::bottom_right), ragged_of({9, 0, 17}, {9, 56, 30}, 0, 5, 11))));
  // A bottom-right window whose right reach is at least max_seqlen_k but short of a sequence's
  // queries: FlashAttention-2 would take it as unbounded (a known bug), so flash declines it.
  expect_declined(TorchVarlenOp::flash,
                  problem_of({1, 2, 2, 38, 3, 64, 64}, MaskExpr::window(100, 24, Align::bottom_right), ragged_of({38}, {3})), "issue 895");
  for (TorchVarlenOp op : {TorchVarlenOp::flash, TorchVarlenOp::efficient}) {
    EXPECT_FALSE(torch_varlen_refusal(op, problem_of(s, MaskExpr::all_visible(), lens)));
    EXPECT_FALSE(torch_varlen_refusal(op, problem_of(s, MaskExpr::all_visible(), std::nullopt)));  // a dense batch
    // Q with gaps: no seqused_q.
    expect_declined(op, problem_of(s, MaskExpr::all_visible(), ragged_of({40, 0, 17}, {9, 56, 30}, 3)), "gap_q = 3");
    // A mask no op computes: random, per head.
    expect_declined(op, problem_of(s, test::random_mask(), lens), "declines the mask");
  }
  // Causal top-left where a sequence has Lq != Lkv: the efficient op's custom_mask_type 1, which
  // flash cannot express.
  const Problem top_left = problem_of(s, MaskExpr::causal_mask(Align::top_left), lens);
  EXPECT_FALSE(torch_varlen_refusal(TorchVarlenOp::efficient, top_left));
  expect_declined(TorchVarlenOp::flash, top_left, "declines the mask");
  // A bottom-right sliding window: flash's window_size_left/right, which efficient declines here.
  const Problem window = problem_of(s, MaskExpr::window(6, 2, Align::bottom_right), lens);
  EXPECT_FALSE(torch_varlen_refusal(TorchVarlenOp::flash, window));
  expect_declined(TorchVarlenOp::efficient, window, "declines the mask");
  // A head dim flash cannot take even padded.
  expect_declined(TorchVarlenOp::flash, problem_of({1, 1, 1, 8, 8, 257, 257}, MaskExpr::all_visible(), std::nullopt),
                  "head dims up to 256");
}

// Runs everywhere: the backends are registered, CUDA-only, ragged, without dLSE or a softcap.
TEST(VarlenRefusal, BackendsAreRegistered) {
  const std::vector<BackendInfo> listed = list_backends();
  for (const char* name : kVarlenBackends) {
    const auto it = std::find_if(listed.begin(), listed.end(), [&](const BackendInfo& i) { return i.name == name; });
    ASSERT_NE(it, listed.end()) << name;
    const auto be = make_torch_varlen_backend(op_of(name));
    EXPECT_EQ(be->name(), name);
    EXPECT_EQ(be->device(), Device::cuda);
    EXPECT_TRUE(be->envelope().ragged);
    EXPECT_FALSE(be->envelope().softcap);
    EXPECT_FALSE(be->envelope().bias);
    EXPECT_FALSE(be->backward_takes_dlse());
    EXPECT_EQ(be->nondeterministic_outputs(), std::vector<TensorId>{TensorId::dQ});
    EXPECT_EQ(be->contract(DType::f32).has_value(), op_of(name) == TorchVarlenOp::efficient);
  }
}

class GpuVarlen : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuVarlen, NoFindingOnRaggedCases) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  // Each case as test_gpu_backends.cpp judges them, the skip reasons grouped without their numbers.
  test::expect_no_finding_on_ragged_cases(be.get(), varlen_case, kCases, {.digits_as_hash = true});
}

// On a GPU: a mask the op cannot compute is declined by the backend itself (its reason in one
// line) and by the composition engine (UnsupportedError), before any kernel runs.
TEST_P(GpuVarlen, DeclinesAMaskItCannotExpress) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  Case c;
  c.seed = 43;
  c.shape = {2, 2, 2, 24, 40, 64, 64};
  c.dtype = DType::bf16;
  c.mask = MaskExpr::window(5, 5, Align::top_left);  // top-left windows: neither op's
  c.ragged = ragged_of({24, 13}, {40, 31}, 0, 2, 3);
  ASSERT_NO_FATAL_FAILURE(test::expect_mask_declined(*be, c));
  // The same case with each sequence's causal mask runs.
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  EXPECT_FALSE(be->unsupported_reason(full_problem(c, generate_inputs(c)))) << GetParam();
}

// On a GPU: the same judging flags a fault planted in O (test::Planted: one element of a row that
// sees a key moved by 0.5) in every case where it was planted.
TEST_P(GpuVarlen, FlagsAPlantedFault) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  test::expect_planted_o_fault_flagged(*be, varlen_case);
}

INSTANTIATE_TEST_SUITE_P(Torch, GpuVarlen, ::testing::Values(kVarlenBackends[0], kVarlenBackends[1]), backend_param_name);

}  // namespace
}  // namespace attnfuzz
