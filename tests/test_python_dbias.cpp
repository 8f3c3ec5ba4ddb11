// dBias through the Python bridge (bridge protocol 5, docs/python-backends.md): a py: backend's
// backward on a problem whose bias requires a gradient fills Gradients::dbias, shaped like the
// bias, with what the float64 reference computes (oracles/reference.h); planted dBias bugs
// (tests/python/bridge_test_adapters.py) are off by far more; an adapter that does not declare
// bias_grad is refused such a call before its worker hears of it. Skipped where the build's
// Python has no torch (ci/setup.sh makes one that has).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <string>

#include "backends/registry.h"
#include "harness/compose.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "oracles/reference.h"

namespace attnfuzz {
namespace {

constexpr const char* kAdapters = "py:attnfuzz_py.adapters.";

// The planted adapters live in tests/python: on the workers' PYTHONPATH (set before any starts).
[[maybe_unused]] const bool kPlantedOnPath = [] {
  ::setenv("PYTHONPATH", ATTNFUZZ_SOURCE_DIR "/tests/python", 1);
  return true;
}();

std::unique_ptr<Backend> python_backend(const std::string& spec) {
  try {
    return make_backend(spec);
  } catch (const std::exception& e) {
    const std::string why = e.what();
    if (why.find("No module named 'torch'") != std::string::npos) return nullptr;  // the start-up error's one line names it
    throw;
  }
}

// B=2, Hq=4, Hkv=2, Sq=9, Skv=13, Dqk=Dv=head_dim (JAX's public API takes one head dim),
// bottom-right causal (every row sees a key).
Case biased_case(uint64_t seed, std::array<bool, 4> spans, DType dtype = DType::f32, std::optional<double> softcap = std::nullopt,
                 int64_t head_dim = 8) {
  Case c;
  c.seed = seed;
  c.shape = {2, 4, 2, 9, 13, head_dim, head_dim};
  c.dtype = dtype;
  c.softcap = softcap;
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  c.d_lse = ValueDist{};
  ScoreBias b;
  b.spans = spans;
  b.values.sigma = 1.5;
  b.requires_grad = true;
  c.bias = b;
  return c;
}

const std::array<bool, 4> kSpans[] = {{true, true, true, true},   {false, true, true, true}, {true, false, false, true},
                                      {false, false, true, false}, {false, false, false, false}};

// The backend's dBias on the whole case as one call and the reference's, each with the dLSE the
// backend takes (none: zeros, the term attnfuzz adds itself), and |dS| summed as dBias sums dS:
// the scale of the sums' rounding. (A bias constant along the keys has dBias = 0 without dLSE,
// the softmax does not see it: what an adapter returns there is that rounding alone.)
struct DbiasPair {
  Tensor got, want, scale;
  size_t unwritten = 0;
  // The error's RMS over the scale's.
  double error() const {
    double d = 0, n = 0;
    for (size_t i = 0; i < got.numel(); ++i) {
      d += (got.data[i] - want.data[i]) * (got.data[i] - want.data[i]);
      n += scale.data[i] * scale.data[i];
    }
    return std::sqrt(d / std::max(n, 1e-300));
  }
};
DbiasPair dbias_of(Backend& be, const Case& c) {
  const Inputs in = generate_inputs(c);
  Problem p = full_problem(c, in);
  p.bias_requires_grad = true;
  const Tensor d_lse = be.backward_takes_dlse() ? in.d_lse : Tensor(in.d_lse.shape);
  const Forward f = be.forward(p);
  const Gradients g = be.backward(p, f, in.d_out, d_lse);
  const Forward rf = reference_forward(p);
  const Gradients r = reference_backward(p, rf, in.d_out, d_lse);
  Problem dense = p;  // the same bias over every (b, h, i, j): its dBias is dS itself
  const Shape& s = p.shape;
  dense.bias = Tensor({s.batch, s.heads_q, s.seq_q, s.seq_kv});
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < s.seq_q; ++i)
        for (int64_t j = 0; j < s.seq_kv; ++j) dense.bias.at(b, h, i)[j] = p.bias_at(b, h, i, j);
  const Tensor ds = reference_backward(dense, rf, in.d_out, d_lse).dbias;
  Tensor scale(p.bias.shape);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < s.seq_q; ++i)
        for (int64_t j = 0; j < s.seq_kv; ++j) scale.data[p.bias_offset(b, h, i, j)] += std::fabs(ds.at(b, h, i)[j]);
  const auto it = g.unwritten.find(TensorId::dBias);
  return {g.dbias, r.dbias, scale, it == g.unwritten.end() ? 0 : it->second};
}

struct Expect {
  const char* spec;
  DType dtype;
  bool softcap;
  double bound;           // DbiasPair::error()
  bool cuda = false;      // skipped where the adapter finds no CUDA device
  int64_t head_dim = 8;  // 16 for torch.compile(flex_attention) with static shapes (Inductor's minimum)
};

void PrintTo(const Expect& e, std::ostream* os) { *os << e.spec << " " << to_string(e.dtype) << (e.softcap ? " softcap" : ""); }

class PythonDbias : public ::testing::TestWithParam<Expect> {};

TEST_P(PythonDbias, MatchesTheReference) {
  const Expect e = GetParam();
  auto be = python_backend(std::string(kAdapters) + e.spec);
  if (!be) GTEST_SKIP() << "the build's Python has no torch";
  ASSERT_TRUE(be->envelope().bias_grad) << e.spec;
  uint64_t seed = 40;
  int ran = 0;
  for (const auto& spans : kSpans) {
    const Case c = biased_case(++seed, spans, e.dtype, e.softcap ? std::optional<double>(4.0) : std::nullopt, e.head_dim);
    if (const auto why = be->unsupported_reason(full_problem(c, generate_inputs(c)))) {
      if (e.cuda && why->find("CUDA") != std::string::npos) GTEST_SKIP() << *why;
      continue;
    }
    const DbiasPair d = dbias_of(*be, c);
    SCOPED_TRACE(std::string(e.spec) + " spans " + std::to_string(spans[0]) + std::to_string(spans[1]) + std::to_string(spans[2]) +
                 std::to_string(spans[3]));
    ASSERT_EQ(d.got.shape, d.want.shape);
    EXPECT_EQ(d.unwritten, 0u);
    EXPECT_LE(d.error(), e.bound);
    ++ran;
  }
  EXPECT_EQ(ran, static_cast<int>(std::size(kSpans))) << e.spec << " declined some of the problems";
}

INSTANTIATE_TEST_SUITE_P(
    Adapters, PythonDbias,
    ::testing::Values(Expect{"minimal:Minimal", DType::f32, false, 1e-6}, Expect{"minimal:Minimal", DType::f32, true, 1e-6},
                      Expect{"sdpa:Sdpa?kernel=math", DType::f32, false, 1e-6}, Expect{"sdpa:Sdpa?kernel=math", DType::bf16, false, 1e-2},
                      Expect{"flex:FlexEager", DType::f32, false, 1e-6}, Expect{"flex:FlexEager", DType::f32, true, 1e-6},
                      Expect{"flex:FlexEager", DType::f16, false, 2e-3}, Expect{"jax_sdpa:JaxSdpa?precision=highest", DType::f32, false, 1e-6},
                      Expect{"jax_sdpa:JaxF32Logits?precision=highest", DType::f32, false, 1e-6},
                      // Declared from torch's source, not yet run (no GPU where this was written):
                      // the bounds are the CPU paths', to be confirmed or measured on a GPU.
                      Expect{"sdpa:Sdpa?kernel=efficient&device=cuda", DType::f32, false, 1e-5, true},
                      Expect{"sdpa:Sdpa?kernel=efficient&device=cuda", DType::bf16, false, 1e-2, true},
                      Expect{"flex:FlexEager?device=cuda", DType::f32, false, 1e-5, true},
                      Expect{"flex:FlexCompiled?device=cuda", DType::f16, true, 2e-3, true},
                      Expect{"flex:FlexCompiled?device=cuda&shapes=static", DType::f16, false, 2e-3, true, 16}),
    [](const ::testing::TestParamInfo<Expect>& info) {  // e.g. sdpa_Sdpa_kernel_math_bf16
      std::string name = std::string(info.param.spec) + "_" + std::string(to_string(info.param.dtype)) + (info.param.softcap ? "_softcap" : "");
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

// The planted bugs: each is far off on the broadcast it breaks (1.02 times dBias: everywhere;
// dBias not summed over a broadcast dimension: wherever the bias broadcasts one of extent > 1).
// Measured: 1.6e-2 and 0.58, against at most 2e-7 for the correct fp32 adapters.
TEST(PythonDbias, PlantedBugsAreFarOff) {
  for (const char* planted : {"py:bridge_test_adapters:DbiasScaled", "py:bridge_test_adapters:DbiasNotSummed"}) {
    auto be = python_backend(planted);
    if (!be) GTEST_SKIP() << "the build's Python has no torch";
    const DbiasPair d = dbias_of(*be, biased_case(7, {false, true, true, true}));
    EXPECT_GE(d.error(), 1e-3) << planted;
  }
}

// An adapter that takes a bias but declares no bias_grad (SDPA's CPU flash kernel refuses a mask
// that requires grad) is refused a call asking for dBias, with the clause's reason.
TEST(PythonDbias, UndeclaredIsRefused) {
  auto be = python_backend(std::string(kAdapters) + "sdpa:Sdpa?kernel=flash");
  if (!be) GTEST_SKIP() << "the build's Python has no torch";
  EXPECT_TRUE(be->envelope().bias && !be->envelope().bias_grad);
  const Case c = biased_case(3, {true, true, true, true});
  try {
    run_composition(*be, c, generate_inputs(c));
    FAIL() << "a call asking for dBias reached an adapter that declares no bias_grad";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("returns no dBias"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnfuzz
