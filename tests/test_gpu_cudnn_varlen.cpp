// cuDNN's native interfaces for a ragged batch (backends/cudnn_varlen.h: cudnn.varlen, packed
// sequences with ragged offsets; cudnn.paged, K and V through a page table) against the float64
// reference on random ragged batches, through the same differential path as
// tests/test_gpu_backends.cpp (label gpu). The packing, offset and page-pool helpers and the mask
// planning are host code and run everywhere; everything that runs cuDNN is reported as skipped,
// with the reason, where no GPU or cuDNN can run it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <set>

#include "backends/cudnn_sdpa.h"
#include "backends/cudnn_varlen.h"
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
using test::problem_of;
using test::ragged_of;

const char* const kBackends[] = {"cudnn.varlen", "cudnn.paged"};

bool is_nan_bits(DType d, uint16_t bits) { return std::isnan(d == DType::bf16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits)); }

// A [B][H][S][D] tensor whose every element says where it is: 1000 b + 100 h + s + d / 64 (the
// checks compare with the value rounded to the dtype).
Tensor labelled(int64_t batch, int64_t heads, int64_t seq, int64_t dim) {
  Tensor t({batch, heads, seq, dim});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t d = 0; d < dim; ++d) t.at(b, h, s)[d] = 1000.0 * static_cast<double>(b) + 100.0 * h + s + d / 64.0;
  return t;
}

// ---- The layout helpers (host code: everywhere) ----

TEST(CudnnVarlenLayout, PackingFollowsRaggedStarts) {
  const CudnnPacking k = cudnn_packing({3, 0, 2}, 2, 4);
  EXPECT_EQ(k.starts, (std::vector<int64_t>{0, 5, 7, 9}));  // each sequence, then its gap; no gap after the last
  EXPECT_EQ(k.total, 13);                                   // and the tail
  Ragged r;
  r.lens_q = {3, 0, 2};
  r.gap_q = 2;
  EXPECT_EQ(k.starts, r.starts_q());
  // Offsets in elements of a [tokens][H][D] buffer: starts[b] * H * D.
  EXPECT_EQ(cudnn_ragged_offsets(k, 2, 8), (std::vector<int64_t>{0, 80, 112, 144}));
  // No gaps, no tail: the cumulative lengths.
  const CudnnPacking dense = cudnn_packing({4, 4}, 0, 0);
  EXPECT_EQ(dense.starts, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(dense.total, 8);
}

TEST(CudnnVarlenLayout, PackAndUnpackPutEveryRowInPlaceAndNaNElsewhere) {
  for (DType d : {DType::f16, DType::bf16}) {
    const int64_t B = 3, H = 2, S = 5, D = 8;
    const Tensor t = labelled(B, H, S, D);
    const CudnnPacking k = cudnn_packing({3, 0, 5}, 2, 3);
    const std::vector<uint16_t> packed = cudnn_pack_thd(t, k, d);
    ASSERT_EQ(packed.size(), static_cast<size_t>(k.total * H * D));
    std::vector<int> real_row(static_cast<size_t>(k.total), 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < k.lens[static_cast<size_t>(b)]; ++i) real_row[static_cast<size_t>(k.starts[static_cast<size_t>(b)] + i)] = 1;
    for (int64_t row = 0; row < k.total; ++row)
      for (int64_t e = 0; e < H * D; ++e)
        EXPECT_EQ(is_nan_bits(d, packed[static_cast<size_t>(row * H * D + e)]), !real_row[static_cast<size_t>(row)]) << "row " << row;
    // Row i of sequence 2 is token 7 + i (3 rows and a gap of 2, then no rows and a gap of 2).
    const uint16_t first = packed[static_cast<size_t>(((7 + 1) * H + 1) * D)];
    EXPECT_EQ(d == DType::bf16 ? bf16_bits_to_float(first) : half_bits_to_float(first), round_to(d, t.at(2, 1, 1)[0]));
    // Back to dense: every kept row exact, the rest zero.
    const Tensor back = cudnn_unpack_thd(packed, k, {2, 0, 5}, H, S, D, d);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t e = 0; e < D; ++e) {
            const bool kept = s < (b == 0 ? 2 : b == 1 ? 0 : 5);
            EXPECT_EQ(back.at(b, h, s)[e], kept ? round_to(d, t.at(b, h, s)[e]) : 0.0) << b << " " << h << " " << s << " " << e;
          }
  }
}

TEST(CudnnVarlenLayout, PagePoolHoldsEachSequencesKeysThroughItsTable) {
  const std::vector<int64_t> lens{5, 0, 9, 4};
  const int64_t P = 4, S = 12, H = 2, D = 8;
  const CudnnPagePool pool = cudnn_page_pool(lens, P, S, 77);
  // The page table of harness/case.h: one page per started block of keys, and a spare page.
  Ragged r;
  r.lens_q = lens;
  r.lens_kv = lens;
  r.page_size = P;
  const PageTable t = page_table(r, 77);
  EXPECT_EQ(pool.pages, t.pages);
  EXPECT_EQ(pool.pages, 1 + 2 + 0 + 3 + 1);
  EXPECT_EQ(pool.table_size, 3);  // ceil(S / P): every padded position has an entry
  std::set<int32_t> used;
  for (size_t b = 0; b < lens.size(); ++b)
    for (int64_t p = 0; p < pool.table_size; ++p) {
      const int32_t e = pool.table[b * static_cast<size_t>(pool.table_size) + static_cast<size_t>(p)];
      ASSERT_GE(e, 0);
      ASSERT_LT(e, pool.pages);
      if (p < (lens[b] + P - 1) / P) {
        EXPECT_EQ(e, t.at(static_cast<int64_t>(b), p));  // the sequence's own pages, in table order
        EXPECT_NE(e, pool.spare);
        EXPECT_TRUE(used.insert(e).second) << "page " << e << " shared";
      } else {
        EXPECT_EQ(e, pool.spare);  // past the sequence's pages: the spare (poisoned) page
      }
    }
  EXPECT_EQ(static_cast<int64_t>(used.size()) + 1, pool.pages);
  // The pool's contents: key j of sequence b at row j % P of page table[b][j / P]; the poison elsewhere.
  const Tensor k = labelled(4, H, S, D);
  const std::vector<uint16_t> pages = cudnn_pack_pages(k, pool, lens, DType::f16);
  ASSERT_EQ(pages.size(), static_cast<size_t>(pool.pages * H * P * D));
  size_t real = 0;
  std::vector<uint8_t> is_key(pages.size(), 0);
  for (size_t b = 0; b < lens.size(); ++b)
    for (int64_t j = 0; j < lens[b]; ++j) {
      const int64_t page = pool.table[b * static_cast<size_t>(pool.table_size) + static_cast<size_t>(j / P)];
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < D; ++e) {
          const size_t at = static_cast<size_t>(((page * P + j % P) * H + h) * D + e);
          EXPECT_EQ(half_bits_to_float(pages[at]), round_to(DType::f16, k.at(static_cast<int64_t>(b), h, j)[e]));
          is_key[at] = 1;
          ++real;
        }
    }
  // Every other element (past the last keys, the spare page): the finite poison.
  size_t poisoned = 0;
  for (size_t at = 0; at < pages.size(); ++at)
    if (!is_key[at]) poisoned += half_bits_to_float(pages[at]) == kUnusedPageRowValue;
  EXPECT_EQ(real + poisoned, pages.size());
  EXPECT_EQ(real, static_cast<size_t>((5 + 9 + 4) * H * D));
  // Every sequence empty: the spare page alone.
  const CudnnPagePool empty = cudnn_page_pool({0, 0}, 16, 40, 3);
  EXPECT_EQ(empty.pages, 1);
  EXPECT_EQ(empty.table_size, 3);
  EXPECT_TRUE(std::all_of(empty.table.begin(), empty.table.end(), [&](int32_t e) { return e == empty.spare; }));
}

// ---- The mask plans (host code: everywhere) ----

TEST(CudnnVarlenPlans, EachSequencesNativeMaskAtItsOwnLengths) {
  const Shape s{3, 4, 2, 40, 56, 64, 64};
  const Ragged lens = ragged_of({40, 0, 17}, {9, 56, 30}, 3, 5, 11);
  // Each sequence's bottom-right diagonal: causal aligned to the lengths the packed buffers hold.
  const auto br = cudnn_varlen_mask_plans(problem_of(s, MaskExpr::causal_mask(Align::bottom_right), lens));
  ASSERT_FALSE(br.empty());
  EXPECT_EQ(br.front().describe(), "causal_br+padding");
  EXPECT_EQ(br.front().seq_len_q, (std::vector<int32_t>{40, 0, 17}));
  EXPECT_EQ(br.front().seq_len_kv, (std::vector<int32_t>{9, 56, 30}));
  // Top-left causal and no mask.
  EXPECT_EQ(cudnn_varlen_mask_plans(problem_of(s, MaskExpr::causal_mask(Align::top_left), lens)).front().describe(), "causal_tl+padding");
  EXPECT_EQ(cudnn_varlen_mask_plans(problem_of(s, MaskExpr::all_visible(), lens)).front().describe(), "none+padding");
  // A dense batch: padding to the full lengths.
  const auto dense = cudnn_varlen_mask_plans(problem_of(s, MaskExpr::causal_mask(Align::bottom_right), std::nullopt));
  ASSERT_FALSE(dense.empty());
  EXPECT_EQ(dense.front().seq_len_q, (std::vector<int32_t>{40, 40, 40}));
  EXPECT_EQ(dense.front().seq_len_kv, (std::vector<int32_t>{56, 56, 56}));
  // A bottom-right sliding window: a band.
  const auto window = cudnn_varlen_mask_plans(problem_of(s, MaskExpr::window(6, 2, Align::bottom_right), lens));
  ASSERT_FALSE(window.empty());
  for (const CudnnMaskPlan& plan : window) {
    EXPECT_TRUE(plan.padding()) << plan.describe();
    EXPECT_FALSE(plan.bias) << plan.describe();
    EXPECT_FALSE(plan.score_bias) << plan.describe();
    for (size_t b = 0; b < 3; ++b) {
      EXPECT_LE(plan.seq_len_q[b], lens.lens_q[b]);
      EXPECT_LE(plan.seq_len_kv[b], lens.lens_kv[b]);
    }
  }
  // A random mask, per head: no native plan.
  EXPECT_TRUE(cudnn_varlen_mask_plans(problem_of(s, test::random_mask(), lens)).empty());
}

// The cases the backends are for: a ragged batch in every case (gaps, tails, page sizes, and
// sequences of 0 and 1 queries or keys as random_ragged draws them), fp16 or bf16, head dims
// rounded up to multiples of 8, no mask or causal (each sequence's bottom-right or top-left
// diagonal), no softcap, no bias, small sizes; GQA, Dqk != Dv, dLSE and a quarter with a
// composition as random_case draws them.
Case varlen_case(uint64_t seed) {
  RandomCaseOptions opt;
  opt.max_seq = 64;
  opt.max_dim = 64;
  opt.p_ragged = 1.0;
  opt.p_softcap = 0.0;
  opt.p_composition = 0.25;
  opt.dtypes = {DType::f16, DType::bf16};
  Case c = random_case(seed + 8'000'000, opt);
  auto round8 = [](int64_t d) { return std::min<int64_t>(128, (d + 7) / 8 * 8); };
  c.shape.head_dim_qk = round8(c.shape.head_dim_qk);
  c.shape.head_dim_v = round8(c.shape.head_dim_v);
  c.layouts = Layouts{};  // the backends pack their own buffers; the dense layouts were drawn for the old head dims
  c.mask = seed % 3 == 0   ? MaskExpr::all_visible()
           : seed % 3 == 1 ? MaskExpr::causal_mask(Align::bottom_right)
                           : MaskExpr::causal_mask(Align::top_left);
  // Misaligned ragged offsets end the process's CUDA context with a sticky fault (stop 57,
  // docs/findings/LEDGER.md): campaigns' isolated workers meet them, this process cannot.
  c.ragged->misaligned = false;
  return c;
}
constexpr int kCases = 300;

// A stand-in with the backends' envelope and mask planning (cudnn_varlen_mask_plans), whose
// forward and backward return zeros: with it the composition engine says, without a GPU, which
// runs the backends' own checks accept (cuDNN's graph build decides the rest on a GPU).
class PlanProbe final : public test::ZeroProbe {
 public:
  using ZeroProbe::ZeroProbe;
  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    if (auto why = envelope().refusal(p)) return why;
    if (cudnn_varlen_mask_plans(p).empty()) return std::string("declines the mask");
    return std::nullopt;
  }
};

// Runs everywhere: of the runs the GPU test makes (the single call and the case's composition),
// the backends' own checks accept more than half.
TEST(CudnnVarlenPlans, AcceptMostOfTheTestsRaggedCases) {
  for (auto make : {make_cudnn_varlen_backend, make_cudnn_paged_backend}) {
    PlanProbe probe(make());
    const test::Acceptance a = test::accepted_runs(probe, varlen_case, kCases, "the mask planning accepts");
    EXPECT_GT(a.accepted * 2, a.runs) << probe.name();
  }
}

// Runs everywhere: the hand-made ragged case of the GPU test below is a valid case, and its mask
// (each sequence's bottom-right causal) has a native plan at the call's lengths.
TEST(CudnnVarlenPlans, TheHandMadeCaseIsValid) {
  Case c;
  c.seed = 43;
  c.shape = {3, 4, 2, 24, 40, 64, 32};
  c.dtype = DType::bf16;
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  c.ragged = ragged_of({24, 0, 13}, {40, 7, 31}, 3, 2, 5, 16);
  EXPECT_NO_THROW(validate(c));
  const auto plans = cudnn_varlen_mask_plans(full_problem(c, generate_inputs(c)));
  ASSERT_FALSE(plans.empty());
  EXPECT_EQ(plans.front().describe(), "causal_br+padding");
}

// Runs everywhere: the backends are registered, CUDA-only, ragged, without a bias, dLSE or softcap.
TEST(CudnnVarlenPlans, BackendsAreRegistered) {
  const std::vector<BackendInfo> listed = list_backends();
  for (const char* name : kBackends) {
    const auto it = std::find_if(listed.begin(), listed.end(), [&](const BackendInfo& i) { return i.name == name; });
    ASSERT_NE(it, listed.end()) << name;
    const auto be = std::string(name) == "cudnn.varlen" ? make_cudnn_varlen_backend() : make_cudnn_paged_backend();
    EXPECT_EQ(be->name(), name);
    EXPECT_EQ(be->device(), Device::cuda);
    EXPECT_TRUE(be->envelope().ragged);
    EXPECT_FALSE(be->envelope().softcap);
    EXPECT_FALSE(be->envelope().bias);
    EXPECT_FALSE(be->envelope().bias_grad);
    EXPECT_FALSE(be->backward_takes_dlse());
    EXPECT_FALSE(be->contract(DType::f32).has_value());
    EXPECT_TRUE(be->contract(DType::bf16).has_value());
  }
}

// ---- On a GPU ----

class GpuCudnnVarlen : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuCudnnVarlen, NoFindingOnRaggedCases) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  // Each case as test_gpu_backends.cpp judges them, with the share of the runs accepted.
  test::expect_no_finding_on_ragged_cases(be.get(), varlen_case, kCases, {.print_share = true});
}

// On a GPU: a dense batch (no Ragged: every length full) runs, as does a ragged one with gaps, a
// tail, an empty sequence and (paged) a page size; a mask no native plan expresses is declined
// in one line, before any kernel runs.
TEST_P(GpuCudnnVarlen, TakesDenseAndRaggedBatchesAndDeclinesOtherMasks) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  Case c;
  c.seed = 43;
  c.shape = {3, 4, 2, 24, 40, 64, 32};
  c.dtype = DType::bf16;
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  for (std::optional<Ragged> ragged : {std::optional<Ragged>{}, std::optional<Ragged>(ragged_of({24, 0, 13}, {40, 7, 31}, 3, 2, 5, 16))}) {
    c.ragged = ragged;
    test::expect_taken_without_finding(*be, c);
  }
  c.mask = test::random_mask();
  test::expect_mask_declined(*be, c);
}

// On a GPU: the same judging flags a fault planted in O (test::Planted: one element of a row that
// sees a key moved by 0.5) wherever it was planted (the scatter back to the dense tensors is what
// the verdict sees).
TEST_P(GpuCudnnVarlen, FlagsAPlantedFault) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  test::expect_planted_o_fault_flagged(*be, varlen_case);
}

INSTANTIATE_TEST_SUITE_P(Cudnn, GpuCudnnVarlen, ::testing::Values(kBackends[0], kBackends[1]), backend_param_name);

}  // namespace
}  // namespace attnfuzz
