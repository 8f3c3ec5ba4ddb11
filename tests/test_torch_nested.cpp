// LibTorch's SDPA on nested tensors (backends/torch_nested.h): the adapter's mask check and the
// backends' registration (host code), and on the CPU torch.nested.math judged on random ragged
// batches with no finding, LibTorch's own refusals (a gap between sequences, grouped heads, a
// causal mask, 16-bit inputs) clean and in one line, and a fault planted in its O flagged. The
// GPU backends' tests: tests/test_gpu_nested.cpp.
#include <gtest/gtest.h>

#include <iostream>

#include "backends/registry.h"
#include "backends/torch_nested.h"
#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "harness/inputs.h"
#include "tests/backend_test_util.h"
#include "tests/varlen_test_util.h"

namespace attnfuzz {
namespace {

using test::problem_of;
using test::ragged_of;

const char* const kNestedBackends[] = {"torch.nested.math", "torch.nested.math.cuda", "torch.nested.flash"};

void expect_declined(NestedSdpaKernel k, const Problem& p, const std::string& says) {
  const auto why = torch_nested_refusal(k, p);
  ASSERT_TRUE(why.has_value()) << says;
  EXPECT_NE(why->find(says), std::string::npos) << *why;
  EXPECT_EQ(why->find('\n'), std::string::npos) << *why;
}

constexpr NestedSdpaKernel kKernels[] = {NestedSdpaKernel::math, NestedSdpaKernel::flash};

// Runs everywhere: is_causal means the top-left diagonal of each sequence's own block (SDPA's
// documented alignment), so a bottom-right causal mask is taken only where it is the same mask.
TEST(NestedRefusal, TakesNoMaskAndEachSequencesTopLeftCausal) {
  const Shape s{3, 2, 2, 20, 24, 16, 16};
  const Ragged lens = ragged_of({20, 0, 7}, {9, 24, 13}, 0, 0, 5);
  const Ragged square = ragged_of({5, 0, 11}, {5, 0, 11}, 0, 0, 2);
  const Shape one{1, 2, 2, 20, 24, 16, 16};
  for (NestedSdpaKernel k : kKernels) {
    EXPECT_FALSE(torch_nested_refusal(k, problem_of(one, MaskExpr::all_visible(), ragged_of({20}, {9}, 0, 0, 5))));
    EXPECT_FALSE(torch_nested_refusal(k, problem_of(one, MaskExpr::causal_mask(Align::top_left), ragged_of({11}, {11}, 0, 0, 2))));
    EXPECT_FALSE(torch_nested_refusal(k, problem_of({1, 2, 2, 20, 20, 16, 16}, MaskExpr::causal_mask(Align::top_left), std::nullopt)));
    // Every sequence square: the two alignments are one mask.
    EXPECT_FALSE(torch_nested_refusal(k, problem_of(one, MaskExpr::causal_mask(Align::bottom_right), ragged_of({11}, {11}, 0, 0, 2))));
    expect_declined(k, problem_of(s, MaskExpr::causal_mask(Align::bottom_right), lens), "declines the mask");
    expect_declined(k, problem_of(s, test::random_mask(), lens), "declines the mask");
    expect_declined(k, problem_of(s, MaskExpr::window(3, 1, Align::top_left), lens), "declines the mask");
  }
  EXPECT_FALSE(torch_nested_refusal(NestedSdpaKernel::math, problem_of(s, MaskExpr::causal_mask(Align::top_left), lens)));
}

// Runs everywhere: a large mask's answer is remembered for the calls of its case only: the same
// shape and lengths with another mask get their own answer.
TEST(NestedRefusal, ALargeMasksAnswerIsItsOwn) {
  const Shape big{1, 2, 2, 200, 200, 16, 16};  // 80 000 mask elements: remembered
  const Ragged lens = ragged_of({200}, {200});
  for (int round = 0; round < 2; ++round) {
    EXPECT_FALSE(torch_nested_refusal(NestedSdpaKernel::math, problem_of(big, MaskExpr::causal_mask(Align::top_left), lens)));
    expect_declined(NestedSdpaKernel::math, problem_of(big, test::random_mask(), lens), "declines the mask");
    expect_declined(NestedSdpaKernel::math, problem_of(big, MaskExpr::window(3, 1, Align::top_left), lens), "declines the mask");
    EXPECT_FALSE(torch_nested_refusal(NestedSdpaKernel::math, problem_of(big, MaskExpr::all_visible(), lens)));
  }
}

// Runs everywhere: the fused kernels' known nested-path bugs are declined, with the ledger row;
// the math path takes those cases (it refuses gaps itself, and was never misread).
TEST(NestedRefusal, DeclinesTheFusedPathsKnownBugs) {
  const Shape s{3, 2, 2, 20, 24, 16, 16};
  const Problem top_left = problem_of(s, MaskExpr::causal_mask(Align::top_left), ragged_of({20, 0, 7}, {9, 24, 13}));
  expect_declined(NestedSdpaKernel::flash, top_left, "s61-torch-nested-flash-causal-bottom-right");
  EXPECT_FALSE(torch_nested_refusal(NestedSdpaKernel::math, top_left));
  Ragged gaps = ragged_of({20, 0, 7}, {9, 24, 13}, 0, 3);
  Ragged misaligned = ragged_of({20, 0, 7}, {9, 24, 13});
  misaligned.misaligned = true;
  expect_declined(NestedSdpaKernel::flash, problem_of(s, MaskExpr::all_visible(), gaps), "s61-torch-nested-gaps-read-as-rows");
  expect_declined(NestedSdpaKernel::flash, problem_of(s, MaskExpr::all_visible(), misaligned), "s61-torch-nested-misaligned-fault");
  EXPECT_FALSE(torch_nested_refusal(NestedSdpaKernel::math, problem_of(s, MaskExpr::all_visible(), gaps)));
  EXPECT_FALSE(torch_nested_refusal(NestedSdpaKernel::math, problem_of(s, MaskExpr::all_visible(), misaligned)));
  // One sequence: a tail, no gap between sequences, is read right.
  EXPECT_FALSE(torch_nested_refusal(NestedSdpaKernel::flash,
                                    problem_of({1, 2, 2, 20, 24, 16, 16}, MaskExpr::all_visible(), ragged_of({20}, {9}, 4, 4, 7))));
}

// Runs everywhere: registered, ragged, without dLSE, an LSE or a softcap; the math path held to
// fp32 (it keeps 16-bit nested inputs in their dtype), flash to 16-bit inputs.
TEST(NestedRefusal, BackendsAreRegistered) {
  const std::vector<BackendInfo> listed = list_backends();
  for (const char* name : kNestedBackends) {
    const auto it = std::find_if(listed.begin(), listed.end(), [&](const BackendInfo& i) { return i.name == name; });
    ASSERT_NE(it, listed.end()) << name;
    const std::string n = name;
    const NestedSdpaKernel k = n.find("math") != std::string::npos ? NestedSdpaKernel::math : NestedSdpaKernel::flash;
    const auto be = make_torch_nested_backend(k, n == "torch.nested.math" ? Device::cpu : Device::cuda);
    EXPECT_EQ(be->name(), n);
    EXPECT_TRUE(be->envelope().ragged) << n;
    EXPECT_FALSE(be->envelope().softcap) << n;
    EXPECT_FALSE(be->envelope().bias) << n;
    EXPECT_FALSE(be->backward_takes_dlse()) << n;
    EXPECT_FALSE(be->returns_lse()) << n;
    EXPECT_EQ(be->contract(DType::f32).has_value(), k == NestedSdpaKernel::math) << n;
    EXPECT_EQ(be->contract(DType::bf16).has_value(), k != NestedSdpaKernel::math) << n;
    EXPECT_EQ(be->nondeterministic_outputs().empty(), k == NestedSdpaKernel::math) << n;
  }
}

// What the CPU math path takes: fp32, no mask, one K/V head per query head, sequences back to
// back (no gap, no tail, aligned); lengths, head dims, dLSE and compositions as random_case draws
// them (sequences of 0 and 1 queries or keys among them).
Case nested_math_case(uint64_t seed) {
  RandomCaseOptions opt;
  opt.max_seq = 40;
  opt.p_ragged = 1.0;
  opt.p_softcap = 0.0;
  opt.dtypes = {DType::f32};
  Case c = random_case(seed + 9'100'000, opt);
  c.mask = MaskExpr::all_visible();
  c.shape.heads_q = c.shape.heads_kv;
  c.ragged->gap_q = c.ragged->gap_kv = c.ragged->tail = 0;
  c.ragged->misaligned = false;
  return c;
}

TEST(NestedMath, JudgesRandomRaggedCasesWithoutAFinding) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, "torch.nested.math");
  const test::Tally t = test::judge_cases(be.get(), nested_math_case, 120);
  // Not run: merged compositions (no LSE to merge), and what LibTorch's nested math path itself
  // fails on (a call whose sequences are all empty; some with a sequence without keys:
  // docs/findings/README.md, s61-torch-nested-math-zero-keys-setStorage).
  EXPECT_GT(t.ran * 2, t.runs) << "torch.nested.math ran too few of the runs to say anything";
}

TEST(NestedMath, FlagsAPlantedFault) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, "torch.nested.math");
  test::expect_planted_o_fault_flagged(*be, nested_math_case);
}

// LibTorch's own refusals reach the harness as a declined call (UnsupportedError) with its
// message in one line: a gap between sequences (the math path takes contiguous nested tensors
// only), grouped heads, a causal mask; 16-bit inputs are declined before any call.
TEST(NestedMath, LibrarysRefusalsAreCleanDeclines) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, "torch.nested.math");
  const Shape s{2, 2, 2, 12, 9, 8, 8};
  auto expect_declined = [&](const Case& c, const std::string& says) {
    const Inputs in = generate_inputs(c);
    EXPECT_FALSE(be->unsupported_reason(full_problem(c, in))) << says;
    try {
      run_composition(*be, c, in, Composition{});
      ADD_FAILURE() << "taken: " << says << "\n" << write_case(c);
    } catch (const UnsupportedError& e) {
      const std::string why = e.what();
      EXPECT_NE(why.find(says), std::string::npos) << why;
      EXPECT_EQ(why.find('\n'), std::string::npos) << why;
      EXPECT_EQ(why.find("prototype"), std::string::npos) << why;
    }
  };
  Case c;
  c.seed = 5;
  c.shape = s;
  c.dtype = DType::f32;
  c.mask = MaskExpr::all_visible();
  c.ragged = ragged_of({12, 4}, {9, 0}, 1);
  expect_declined(c, "contiguous");
  c.ragged = ragged_of({12, 4}, {9, 3});
  c.mask = MaskExpr::causal_mask(Align::top_left);
  expect_declined(c, "is_causal");
  c.mask = MaskExpr::all_visible();
  c.shape.heads_q = 4;
  expect_declined(c, "refused the call");
  c.shape.heads_q = 2;
  c.dtype = DType::bf16;
  const auto why = be->unsupported_reason(full_problem(c, generate_inputs(c)));
  ASSERT_TRUE(why.has_value());
  // The same case in fp32 runs: nothing else was in the way.
  c.dtype = DType::f32;
  EXPECT_NO_THROW(run_composition(*be, c, generate_inputs(c), Composition{}));
}

}  // namespace
}  // namespace attnfuzz
