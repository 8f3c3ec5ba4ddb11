// LibTorch's SDPA on nested tensors on a GPU (backends/torch_nested.h: torch.nested.flash,
// torch.nested.math.cuda) against the float64 reference on random ragged
// batches, through the same differential path as tests/test_gpu_backends.cpp; a planted fault in
// their output must be flagged; a mask they cannot take is declined in one line (label gpu).
// They skip, visibly and with the reason, without a GPU or a CUDA LibTorch. The host tests of the
// adapter: tests/test_torch_nested.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/registry.h"
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
using test::ragged_of;

// The cases nested tensors are for: a ragged batch in every case (gaps between the sequences and
// a tail in some, sequences of 0 and 1 queries or keys among them), no mask or causal (SDPA's
// is_causal: each sequence's top-left diagonal), no softcap, small sizes; head dims that are
// multiples of 8; the dtype the backend takes (flash fp16/bf16, the math path fp32);
// GQA, Dqk != Dv, dLSE and a quarter with a composition as random_case draws them, for LibTorch
// to take or refuse. No misaligned buffers (declined: a known sticky fault).
Case nested_case(uint64_t seed, bool sixteen_bit) {
  RandomCaseOptions opt;
  opt.max_seq = 64;
  opt.p_ragged = 1.0;
  opt.p_softcap = 0.0;
  opt.p_composition = 0.25;
  opt.dtypes = sixteen_bit ? std::vector<DType>{DType::f16, DType::bf16} : std::vector<DType>{DType::f32};
  Case c = random_case(seed + 8'000'000, opt);
  c.mask = seed % 2 ? MaskExpr::causal_mask(Align::top_left) : MaskExpr::all_visible();
  c.shape.head_dim_qk = (c.shape.head_dim_qk + 7) / 8 * 8;
  c.shape.head_dim_v = (c.shape.head_dim_v + 7) / 8 * 8;
  c.ragged->misaligned = false;
  // Half of the causal cases with every sequence square (the nested flash path's causal mask is
  // then right: its known bug is Lq != Lkv), two thirds without gaps between sequences (the fused
  // paths' known bug): what the backends take stays most of the test.
  if (seed % 4 == 1) {
    c.shape.seq_kv = c.shape.seq_q;
    c.ragged->lens_kv = c.ragged->lens_q;
    c.ragged->gap_kv = c.ragged->gap_q;
  }
  if (seed % 3 != 0) c.ragged->gap_q = c.ragged->gap_kv = 0;
  // Half with one K/V head per query head and no empty sequence: LibTorch's nested flash path
  // refuses grouped heads and sequences of length 0, and the rest should mostly be judged.
  if (seed % 2 == 0) {
    c.shape.heads_q = c.shape.heads_kv;
    for (auto* lens : {&c.ragged->lens_q, &c.ragged->lens_kv})
      for (int64_t& l : *lens) l = std::max<int64_t>(l, 1);
  }
  return c;
}
constexpr int kCases = 150;

class GpuNested : public ::testing::TestWithParam<std::string> {
 protected:
  std::function<Case(uint64_t)> maker() const {
    const bool sixteen_bit = GetParam() != "torch.nested.math.cuda";
    return [sixteen_bit](uint64_t seed) { return nested_case(seed, sixteen_bit); };
  }
};

TEST_P(GpuNested, NoFindingOnRaggedCases) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  const test::Tally t = test::judge_cases(be.get(), maker(), kCases, {.digits_as_hash = true, .print_share = true});
  // LibTorch refuses much here (zero-length sequences, grouped heads, causal on the math path):
  // what matters is that a good share is judged.
  EXPECT_GT(t.ran * 5, t.runs) << GetParam() << " ran too few of the runs to say anything";
}

TEST_P(GpuNested, DeclinesAMaskItCannotExpress) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  Case c;
  c.seed = 43;
  c.shape = {1, 2, 2, 24, 40, 64, 64};
  c.dtype = GetParam() == "torch.nested.math.cuda" ? DType::f32 : DType::bf16;
  c.mask = MaskExpr::causal_mask(Align::bottom_right);  // not is_causal where Lq != Lkv
  c.ragged = ragged_of({24}, {40}, 0, 0, 3);
  ASSERT_NO_FATAL_FAILURE(test::expect_mask_declined(*be, c));
  c.mask = MaskExpr::all_visible();
  EXPECT_FALSE(be->unsupported_reason(full_problem(c, generate_inputs(c)))) << GetParam();
}

TEST_P(GpuNested, FlagsAPlantedFault) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  test::expect_planted_o_fault_flagged(*be, maker());
}

INSTANTIATE_TEST_SUITE_P(Torch, GpuNested, ::testing::Values("torch.nested.flash", "torch.nested.math.cuda"),
                         backend_param_name);

}  // namespace
}  // namespace attnfuzz
