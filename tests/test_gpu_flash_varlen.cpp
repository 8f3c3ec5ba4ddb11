// The project's kernels through their varlen interface (backends/flash_varlen.h:
// cuda.flash.varlen, packed sequences with per-sequence starts and lengths; cuda.flash.paged, K and
// V through a page table) against the float64 reference on random ragged batches, through the
// same differential path as tests/test_gpu_backends.cpp (label gpu), and against cuda.flash, which
// sees the same batch padded with a dense mask: the kernels' arithmetic on a sequence does not
// depend on how it was handed in, so every output must agree bit for bit. The band planning is
// host code and runs everywhere; everything that runs a kernel is reported as skipped, with the
// reason, where no GPU can run it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "backends/flash_varlen.h"
#include "backends/registry.h"
#include "generators/domain.h"
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

const char* const kBackends[] = {"cuda.flash.varlen", "cuda.flash.paged"};

// ---- The band planning (host code: everywhere) ----

FlashBandOrWhy band_of(const Shape& s, const MaskExpr& mask, std::optional<Ragged> ragged) {
  return flash_varlen_band(test::problem_of(s, mask, std::move(ragged)));
}

TEST(FlashVarlenBand, EachSequencesDiagonalAtItsOwnLengths) {
  const Shape s{3, 4, 2, 40, 56, 64, 64};
  const Ragged lens = ragged_of({40, 0, 17}, {9, 56, 30}, 3, 5, 11);
  const FlashBandOrWhy br = band_of(s, MaskExpr::causal_mask(Align::bottom_right), lens);
  ASSERT_TRUE(br.band) << br.why;
  EXPECT_EQ(br.band->left, -1);
  EXPECT_EQ(br.band->right, 0);
  EXPECT_EQ(br.band->diagonals, (std::vector<int64_t>{9 - 40, 56 - 0, 30 - 17}));
  const FlashBandOrWhy tl = band_of(s, MaskExpr::causal_mask(Align::top_left), lens);
  ASSERT_TRUE(tl.band) << tl.why;
  EXPECT_EQ(tl.band->diagonals, (std::vector<int64_t>{0, 0, 0}));
  const FlashBandOrWhy none = band_of(s, MaskExpr::all_visible(), lens);
  ASSERT_TRUE(none.band) << none.why;
  EXPECT_EQ(none.band->left, -1);
  EXPECT_EQ(none.band->right, -1);
  const FlashBandOrWhy window = band_of(s, MaskExpr::window(6, 2, Align::bottom_right), lens);
  ASSERT_TRUE(window.band) << window.why;
  EXPECT_EQ(window.band->left, 6);
  EXPECT_EQ(window.band->right, 2);
  EXPECT_EQ(window.band->diagonals, br.band->diagonals);
  // A dense batch: one diagonal, the full lengths'.
  const FlashBandOrWhy dense = band_of(s, MaskExpr::causal_mask(Align::bottom_right), std::nullopt);
  ASSERT_TRUE(dense.band) << dense.why;
  EXPECT_EQ(dense.band->diagonals, (std::vector<int64_t>{16, 16, 16}));
  // A random mask, per head: no band, and the reason says so in one line.
  const FlashBandOrWhy random = band_of(s, test::random_mask(), lens);
  EXPECT_FALSE(random.band);
  EXPECT_NE(random.why.find("declines the mask"), std::string::npos) << random.why;
  EXPECT_EQ(random.why.find('\n'), std::string::npos) << random.why;
}

// The cases the backends are for: a ragged batch in every case (gaps, tails, page sizes, and
// sequences of 0 and 1 queries or keys as random_ragged draws them), fp16 or bf16, head dims up
// to 128, no mask, causal (each sequence's bottom-right or top-left diagonal) or a bottom-right
// sliding window, a softcap in some; GQA, Dqk != Dv, dLSE and a quarter with a composition as
// random_case draws them.
Case varlen_case(uint64_t seed) {
  RandomCaseOptions opt;
  opt.max_seq = 80;
  opt.max_dim = 128;
  opt.p_ragged = 1.0;
  opt.p_composition = 0.25;
  opt.dtypes = {DType::f16, DType::bf16};
  Case c = random_case(seed + 9'000'000, opt);
  c.layouts = Layouts{};  // the backends pack their own buffers
  c.mask = seed % 4 == 0   ? MaskExpr::all_visible()
           : seed % 4 == 1 ? MaskExpr::causal_mask(Align::bottom_right)
           : seed % 4 == 2 ? MaskExpr::causal_mask(Align::top_left)
                           : MaskExpr::window(7, 3, Align::bottom_right);
  c.ragged->misaligned = false;  // declined (the kernels load 16 bytes at a time): TakesDenseAndRaggedBatchesAndDeclinesOtherMasks
  return c;
}
constexpr int kCases = 200;

// The decode step (the decode tier's shapes, keys up to 4096 here): 1 to 16 queries a sequence
// against its keys, GQA groups up to 16, a ragged batch with pages in every case; no mask or
// causal bottom-right (a query sees its whole cache, or the keys up to its own position).
Case decode_case(uint64_t seed) {
  RandomCaseOptions opt = RandomCaseOptions::for_tier(domain::SizeTier::decode);
  opt.max_seq = 4096;
  opt.max_dim = 128;
  opt.p_ragged = 1.0;
  opt.p_composition = 0.25;
  opt.dtypes = {DType::f16, DType::bf16};
  Case c = random_case(seed + 9'500'000, opt);
  c.layouts = Layouts{};
  c.mask = seed % 2 ? MaskExpr::causal_mask(Align::bottom_right) : MaskExpr::all_visible();
  c.ragged->misaligned = false;
  return c;
}
constexpr int kDecodeCases = 40;

// The backends' envelope and band planning with zero outputs: which runs they accept, without a GPU.
class BandProbe final : public test::ZeroProbe {
 public:
  using ZeroProbe::ZeroProbe;
  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    if (auto why = envelope().refusal(p)) return why;
    if (!flash_varlen_band(p).band) return std::string("declines the mask");
    return std::nullopt;
  }
};

// Runs everywhere: of the runs the GPU test makes (the single call and the case's composition),
// the band planning accepts more than half (a composition's restricted parts are declined).
TEST(FlashVarlenBand, AcceptsMostOfTheTestsRaggedCases) {
  for (auto make : {make_flash_varlen_backend, make_flash_paged_backend}) {
    BandProbe probe(make());
    const test::Acceptance a = test::accepted_runs(probe, varlen_case, kCases, "the band planning accepts");
    EXPECT_GT(a.accepted * 2, a.runs) << probe.name();
  }
}

// Runs everywhere: the decode cases are decode-sized (at most 16 queries), valid, and accepted.
TEST(FlashVarlenBand, DecodeCasesAreDecodeSizedAndAccepted) {
  for (uint64_t seed = 0; seed < kDecodeCases; ++seed) EXPECT_LE(decode_case(seed).shape.seq_q, 16);
  BandProbe probe(make_flash_paged_backend());
  const test::Acceptance a = test::accepted_runs(probe, decode_case, kDecodeCases, "the band planning accepts");
  EXPECT_GT(a.accepted * 2, a.runs);
}

// Runs everywhere: registered, CUDA-only, ragged, honouring dLSE, with cuda.flash's contract.
TEST(FlashVarlenBand, BackendsAreRegistered) {
  const std::vector<BackendInfo> listed = list_backends();
  for (const char* name : kBackends) {
    const auto it = std::find_if(listed.begin(), listed.end(), [&](const BackendInfo& i) { return i.name == name; });
    ASSERT_NE(it, listed.end()) << name;
    const auto be = std::string(name) == "cuda.flash.varlen" ? make_flash_varlen_backend() : make_flash_paged_backend();
    EXPECT_EQ(be->name(), name);
    EXPECT_EQ(be->device(), Device::cuda);
    EXPECT_TRUE(be->envelope().ragged);
    EXPECT_TRUE(be->envelope().softcap);
    EXPECT_FALSE(be->envelope().bias);
    EXPECT_TRUE(be->backward_takes_dlse());
    EXPECT_FALSE(be->contract(DType::f32).has_value());
    EXPECT_TRUE(be->contract(DType::bf16).has_value());
  }
}

// ---- On a GPU ----

class GpuFlashVarlen : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuFlashVarlen, NoFindingOnRaggedCases) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  test::expect_no_finding_on_ragged_cases(be.get(), varlen_case, kCases, {.print_share = true});
}

// On a GPU: the decode step, judged as above.
TEST_P(GpuFlashVarlen, NoFindingOnDecodeCases) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  test::expect_no_finding_on_ragged_cases(be.get(), decode_case, kDecodeCases, {.print_share = true});
}

// On a GPU: a dense batch (every length full) runs, as does a ragged one with gaps, a tail, an
// empty sequence and (paged) a page size smaller than a tile; a mask that is no band is declined
// in one line, and so is a misaligned case, before any kernel runs.
TEST_P(GpuFlashVarlen, TakesDenseAndRaggedBatchesAndDeclinesOtherMasks) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  Case c;
  c.seed = 43;
  c.shape = {3, 4, 2, 150, 200, 64, 32};
  c.dtype = DType::bf16;
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  for (std::optional<Ragged> ragged :
       {std::optional<Ragged>{}, std::optional<Ragged>(ragged_of({150, 0, 13}, {200, 7, 131}, 3, 2, 5, 3))}) {
    c.ragged = ragged;
    test::expect_taken_without_finding(*be, c, /*every_run=*/true);
  }
  c.ragged->misaligned = true;
  const auto misaligned = be->unsupported_reason(full_problem(c, generate_inputs(c)));
  ASSERT_TRUE(misaligned);
  EXPECT_NE(misaligned->find("misaligned"), std::string::npos) << *misaligned;
  c.ragged->misaligned = false;
  c.mask = test::random_mask();
  test::expect_mask_declined(*be, c);
}

bool same_bits(const Tensor& a, const Tensor& b, std::string* where) {
  if (a.shape != b.shape) return *where = "shapes differ", false;
  for (size_t i = 0; i < a.data.size(); ++i)
    if (std::memcmp(&a.data[i], &b.data[i], sizeof(double)) != 0 && !(std::isnan(a.data[i]) && std::isnan(b.data[i]))) {
      *where = "element " + std::to_string(i) + ": " + std::to_string(a.data[i]) + " against " + std::to_string(b.data[i]);
      return false;
    }
  return true;
}

// On a GPU: on the same problem, every output equals cuda.flash's bit for bit (cuda.flash takes
// the batch padded, with the dense mask; both give O = 0, LSE = -inf and zero gradients past the
// sequences).
TEST_P(GpuFlashVarlen, SameBitsAsCudaFlashOnThePaddedBatch) {
  std::unique_ptr<Backend> be, dense;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  MAKE_BACKEND_OR_SKIP(dense, "cuda.flash");
  int compared = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const Case c = varlen_case(seed);
    const Inputs in = generate_inputs(c);
    const Problem p = full_problem(c, in);
    if (be->unsupported_reason(p) || dense->unsupported_reason(p)) continue;
    const Forward f = be->forward(p), g = dense->forward(p);
    const Gradients df = be->backward(p, g, in.d_out, in.d_lse), dg = dense->backward(p, g, in.d_out, in.d_lse);
    std::string where;
    EXPECT_TRUE(same_bits(f.o, g.o, &where)) << "O " << where << "\n" << write_case(c);
    EXPECT_TRUE(same_bits(f.lse, g.lse, &where)) << "LSE " << where << "\n" << write_case(c);
    EXPECT_TRUE(same_bits(df.dq, dg.dq, &where)) << "dQ " << where << "\n" << write_case(c);
    EXPECT_TRUE(same_bits(df.dk, dg.dk, &where)) << "dK " << where << "\n" << write_case(c);
    EXPECT_TRUE(same_bits(df.dv, dg.dv, &where)) << "dV " << where << "\n" << write_case(c);
    for (const auto& [id, n] : f.unwritten) EXPECT_EQ(n, 0u) << case_key(id) << "\n" << write_case(c);
    for (const auto& [id, n] : df.unwritten) EXPECT_EQ(n, 0u) << case_key(id) << "\n" << write_case(c);
    ++compared;
  }
  std::cout << "  " << GetParam() << ": compared " << compared << " of 60 cases with cuda.flash\n";
  EXPECT_GE(compared, 30);
}

// On a GPU: the same judging flags a fault planted in O (test::Planted).
TEST_P(GpuFlashVarlen, FlagsAPlantedFault) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  test::expect_planted_o_fault_flagged(*be, varlen_case);
}

INSTANTIATE_TEST_SUITE_P(Flash, GpuFlashVarlen, ::testing::Values(kBackends[0], kBackends[1]), backend_param_name);

}  // namespace
}  // namespace attnfuzz
