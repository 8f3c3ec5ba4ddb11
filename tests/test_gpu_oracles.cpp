// The GPU oracle set (kernels/, label gpu): cuda.reference64 against the Eigen reference, the
// GPU contract baselines against oracles/emulated.cpp, and the differential judging alike with
// either set, each also with a score bias. Without a usable GPU every test that runs a kernel
// reports itself skipped, with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <tuple>

#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "harness/inputs.h"
#include "oracles/device_mirror.h"
#include "oracles/gpu_oracles.h"
#include "tests/gpu_test_util.h"
#include "oracles/emulated.h"
#include "oracles/reference.h"
#include "backends/registry.h"

namespace attnfuzz {
namespace {

using gpu_test::bias_cases;

// Hand-made cases for what random draws may miss: shapes across tile edges, fully masked
// rows, GQA and MQA, Dqk != Dv, softcap, dLSE, per-head random masks.
std::vector<Case> edge_cases() {
  std::vector<Case> out;
  auto base = [](uint64_t seed, Shape s, DType d) {
    Case c;
    c.seed = seed;
    c.shape = s;
    c.dtype = d;
    c.d_lse = ValueDist{};  // random dLSE
    return c;
  };
  {  // bottom-right causal with Sq > Skv: the first rows see no key
    Case c = base(11, {1, 2, 2, 150, 70, 64, 64}, DType::bf16);
    c.mask = MaskExpr::causal_mask(Align::bottom_right);
    out.push_back(c);
  }
  {  // GQA (group 4), softcap, Dqk != Dv, top-left causal over several tiles
    Case c = base(12, {2, 8, 2, 130, 200, 96, 40}, DType::f16);
    c.mask = MaskExpr::causal_mask(Align::top_left);
    c.softcap = 5.0;
    out.push_back(c);
  }
  {  // MQA, sliding window, large logits
    Case c = base(13, {1, 6, 1, 257, 257, 128, 128}, DType::f32);
    c.mask = MaskExpr::window(40, 3, Align::top_left);
    c.q.kind = ValueDist::Kind::large_logit;
    c.q.sigma = 6.0;
    out.push_back(c);
  }
  {  // varlen documents with an empty key segment (fully masked rows in the middle)
    Case c = base(14, {1, 2, 1, 100, 90, 32, 48}, DType::bf16);
    c.mask.kind = MaskExpr::Kind::document;
    c.mask.segments_q = {30, 40, 30};
    c.mask.segments_kv = {20, 0, 70};
    out.push_back(c);
  }
  {  // a random dense mask: every (b, h) plane differs
    Case c = base(15, {2, 3, 3, 65, 129, 17, 33}, DType::f32);
    c.mask.kind = MaskExpr::Kind::random;
    c.mask.density = 0.3;
    c.mask.seed = 7;
    c.softcap = 2.0;
    out.push_back(c);
  }
  return out;
}

// `p_bias`: the share of the cases with a bias of random_bias's (its own draw stream: the rest
// of each case is the same at any share).
std::vector<Case> random_cases(int n, uint64_t seed0, double p_bias = 0.0) {
  std::vector<Case> out;
  RandomCaseOptions opt;
  opt.max_seq = 160;
  opt.max_dim = 80;
  opt.max_group = 4;
  opt.p_bias = p_bias;
  for (int i = 0; i < n; ++i) {
    out.push_back(random_case(seed0 + static_cast<uint64_t>(i), opt));
    // The GPU set computes no dBias: a case that asks it is the CPU set's (choose_oracle_device).
    if (out.back().bias) out.back().bias->requires_grad = false;
  }
  return out;
}

// First-order magnitudes of the terms behind each output element, each probability weighted
// by 1 + |S| terms (how far an ulp of a score moves it): |P|(1+|S|)|V| for O, and the same
// weights through |dP| + |D| + |g| for the gradients. The terms of S are the products
// scale |q_d k_d| and the bias b. Unweighted (the float64 comparison), a probability still
// carries 1 + |b| 2^-12: a float64 ulp of a score as large as the mask-like +-1e4 is 2^-52 |b|,
// which the 1e-12 (about 2^-40) bound covers for scores up to 2^12. Naive loops: the cases
// here are small.
struct Sensitivity {
  Tensor o, dq, dk, dv;
};
Sensitivity sensitivity(const Problem& p, const Forward& ref, const Tensor& d_out, const Tensor& d_lse, bool weighted = true) {
  const Shape& s = p.shape;
  Sensitivity m{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}), Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}),
                Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v})};
  std::vector<double> w(static_cast<size_t>(s.seq_kv));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const int64_t hk = h / s.group();
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const double lse = *ref.lse.at(b, h, i);
        if (std::isinf(lse)) continue;
        const double* q = p.q.at(b, h, i);
        const double* dout = d_out.at(b, h, i);
        double delta = 0;
        for (int64_t d = 0; d < s.head_dim_v; ++d) delta += std::fabs(dout[d] * ref.o.at(b, h, i)[d]);
        const double g = std::fabs(*d_lse.at(b, h, i));
        for (int64_t j = 0; j < s.seq_kv; ++j) {
          if (!p.visible(b, h, i, j)) continue;
          const double* k = p.k.at(b, hk, j);
          double sc = 0, terms = 0;
          for (int64_t d = 0; d < s.head_dim_qk; ++d) sc += q[d] * k[d], terms += std::fabs(q[d] * k[d]);
          sc *= p.scale;
          if (p.softcap) sc = *p.softcap * std::tanh(sc / *p.softcap);
          const double bias = p.has_bias() ? p.bias_at(b, h, i, j) : 0.0;
          sc += bias;
          const double wij = std::exp(sc - lse) * (weighted ? 1 + p.scale * terms + std::fabs(bias) : 1 + std::fabs(bias) * 0x1p-12);
          const double* v = p.v.at(b, hk, j);
          double up = delta + g;
          for (int64_t d = 0; d < s.head_dim_v; ++d) {
            m.o.at(b, h, i)[d] += wij * std::fabs(v[d]);
            m.dv.at(b, hk, j)[d] += wij * std::fabs(dout[d]);
            up += std::fabs(dout[d] * v[d]);
          }
          for (int64_t d = 0; d < s.head_dim_qk; ++d) {
            m.dq.at(b, h, i)[d] += p.scale * wij * up * std::fabs(k[d]);
            m.dk.at(b, hk, j)[d] += p.scale * wij * up * std::fabs(q[d]);
          }
        }
      }
    }
  return m;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.data)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

// max |a - b| / max(|ref|, |terms|) over the tensor, where |terms| (optional) is the size of
// the products an element sums: float64 rounding is relative to those, and an element that
// cancels to ~0 (ties: dQ of a row with equal scores is 0 in exact arithmetic) holds only
// rounding noise. -inf must match -inf exactly (LSE of empty rows).
double relative_difference(const Tensor& got, const Tensor& ref, const Tensor* terms, std::string* problem) {
  if (got.shape != ref.shape) {
    *problem = "shape differs";
    return INFINITY;
  }
  double worst = 0;
  for (size_t i = 0; i < ref.numel(); ++i) {
    const double a = got.data[i], b = ref.data[i];
    if (std::isinf(b) || std::isinf(a)) {
      if (a != b) *problem = "infinity where the reference has " + std::to_string(b) + " at " + std::to_string(i);
      continue;
    }
    if (std::isnan(a) != std::isnan(b)) *problem = "NaN at " + std::to_string(i);
    worst = std::max(worst, std::fabs(a - b));
  }
  return worst / std::max({max_abs(ref), terms ? max_abs(*terms) : 0.0, 1e-300});
}

struct Coverage {
  std::map<std::string, int> masks, biases;
  int softcap = 0, gqa = 0, dims_differ = 0, dlse = 0, masked_rows = 0;
};

// The bias's kind and the dimensions it spans: "tensor[1,H,q,1]", "alibi", "relative".
std::string bias_signature(const Case& c) {
  if (!c.bias) return "none";
  if (c.bias->kind != ScoreBias::Kind::tensor) return std::string(to_string(c.bias->kind));
  const char* names[4] = {"B", "H", "q", "kv"};
  std::string s = "tensor[";
  for (size_t d = 0; d < 4; ++d) s += std::string(d ? "," : "") + (c.bias->spans[d] ? names[d] : "1");
  return s + "]";
}

void compare_reference(const Case& c, Coverage& cov) {
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  const Forward ref = reference_forward(p);
  const Gradients gref = reference_backward(p, ref, in.d_out, in.d_lse);
  CudaReference64Backend gpu;
  const Forward f = gpu.forward(p);
  const Gradients g = gpu.backward(p, f, in.d_out, in.d_lse);
  const Sensitivity terms = sensitivity(p, ref, in.d_out, in.d_lse, false);
  const std::tuple<const char*, const Tensor*, const Tensor*, const Tensor*> rows[] = {{"O", &f.o, &ref.o, &terms.o},
                                                                                       {"LSE", &f.lse, &ref.lse, nullptr},
                                                                                       {"dQ", &g.dq, &gref.dq, &terms.dq},
                                                                                       {"dK", &g.dk, &gref.dk, &terms.dk},
                                                                                       {"dV", &g.dv, &gref.dv, &terms.dv}};
  for (const auto& [name, got, want, mag] : rows) {
    std::string problem;
    const double rel = relative_difference(*got, *want, mag, &problem);
    EXPECT_TRUE(problem.empty()) << name << ": " << problem << "\n" << write_case(c);
    EXPECT_LE(rel, 1e-12) << name << " differs from the Eigen reference\n" << write_case(c);
  }
  // Rows with no visible key: O = 0 and dQ = 0 exactly (the convention), LSE = -inf (checked above).
  const Shape& s = c.shape;
  int masked = 0;
  for (int64_t r = 0; r < s.batch * s.heads_q * s.seq_q; ++r) {
    if (ref.lse.data[static_cast<size_t>(r)] != -std::numeric_limits<double>::infinity()) continue;
    ++masked;
    for (int64_t d = 0; d < s.head_dim_v; ++d) EXPECT_EQ(f.o.data[static_cast<size_t>(r * s.head_dim_v + d)], 0.0);
    for (int64_t d = 0; d < s.head_dim_qk; ++d) EXPECT_EQ(g.dq.data[static_cast<size_t>(r * s.head_dim_qk + d)], 0.0);
  }
  ++cov.masks[signature_kind(c.mask)];
  ++cov.biases[bias_signature(c)];
  cov.softcap += c.softcap.has_value();
  cov.gqa += s.group() > 1;
  cov.dims_differ += s.head_dim_qk != s.head_dim_v;
  cov.dlse += c.d_lse.kind != ValueDist::Kind::zero;
  cov.masked_rows += masked > 0;
}

TEST(GpuReference64, MatchesEigenOnEdgeCases) {
  REQUIRE_GPU();
  Coverage cov;
  for (const Case& c : edge_cases()) compare_reference(c, cov);
  EXPECT_GE(cov.masked_rows, 2);
  EXPECT_GE(cov.softcap, 2);
  EXPECT_GE(cov.gqa, 2);
}

TEST(GpuReference64, MatchesEigenOnRandomCases) {
  REQUIRE_GPU();
  Coverage cov;
  for (const Case& c : random_cases(120, 9'000'000)) compare_reference(c, cov);
  std::cout << "  coverage: softcap " << cov.softcap << ", GQA/MQA " << cov.gqa << ", Dqk != Dv " << cov.dims_differ << ", dLSE "
            << cov.dlse << ", fully masked rows " << cov.masked_rows << "; masks:";
  for (const auto& [k, n] : cov.masks) std::cout << " " << k << "=" << n;
  std::cout << "\n";
  // The random mix must actually exercise what the test claims to check.
  EXPECT_GE(cov.masks.size(), 5u);
  EXPECT_GE(cov.softcap, 5);
  EXPECT_GE(cov.gqa, 10);
  EXPECT_GE(cov.dims_differ, 10);
  EXPECT_GE(cov.dlse, 10);
  EXPECT_GE(cov.masked_rows, 3);
}

TEST(GpuReference64, MatchesEigenWithEveryKindOfBias) {
  REQUIRE_GPU();
  Coverage cov;
  for (const Case& c : bias_cases()) compare_reference(c, cov);
  std::cout << "  biases:";
  for (const auto& [k, n] : cov.biases) std::cout << " " << k << "=" << n;
  std::cout << "\n";
  EXPECT_EQ(cov.biases.size(), 18u) << "every broadcast pattern of a dense bias, ALiBi and a relative table";
  EXPECT_GE(cov.masked_rows, 2);
  EXPECT_GE(cov.softcap, 3);
}

TEST(GpuReference64, MatchesEigenOnRandomCasesWithABias) {
  REQUIRE_GPU();
  Coverage cov;
  for (const Case& c : random_cases(60, 9'050'000, 1.0)) compare_reference(c, cov);
  std::cout << "  biases:";
  for (const auto& [k, n] : cov.biases) std::cout << " " << k << "=" << n;
  std::cout << "; softcap " << cov.softcap << ", GQA/MQA " << cov.gqa << ", fully masked rows " << cov.masked_rows << "\n";
  EXPECT_EQ(cov.biases.count("none"), 0u);
  EXPECT_GE(cov.biases.size(), 6u);
  EXPECT_GE(cov.biases.count("alibi") + cov.biases.count("relative"), 2u);
}

// The backends take a bias; dBias they do not compute, and say so (no GPU needed: the backward
// refuses before any kernel).
TEST(GpuOracles, TakeABiasButRefuseDBias) {
  CudaReference64Backend ref;
  CudaEmulatedBackend emu(Contract::fp32, false);
  EXPECT_TRUE(ref.envelope().bias);
  EXPECT_TRUE(emu.envelope().bias);
  Case c = bias_cases().front();
  c.shape = {1, 1, 1, 4, 4, 8, 8};
  const Inputs in = generate_inputs(c);
  Problem p = full_problem(c, in);
  ASSERT_TRUE(p.has_bias());
  EXPECT_FALSE(ref.unsupported_reason(p).has_value());
  p.bias_requires_grad = true;
  const Forward f = reference_forward(p);
  for (Backend* be : std::vector<Backend*>{&ref, &emu}) {
    try {
      be->backward(p, f, in.d_out, in.d_lse);
      ADD_FAILURE() << be->name() << " computed a backward that asks for dBias";
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find("dBias"), std::string::npos) << e.what();
    }
  }
}

// ---- the contract baselines ----

double unit_roundoff_of(Contract k) {
  switch (k) {
    case Contract::fp64:
      return std::ldexp(1.0, -53);
    case Contract::fp32:
      return std::ldexp(1.0, -24);
    case Contract::tf32:
      return std::ldexp(1.0, -11);
    case Contract::tf32x3:
      return std::ldexp(1.0, -22);
    case Contract::fp16:
      return std::ldexp(1.0, -11);
    case Contract::bf16:
      return std::ldexp(1.0, -8);
  }
  return 1;
}

struct Agreement {
  size_t elements = 0, identical = 0;
  double worst_ratio = 0;  // max over elements of |gpu - cpu| / bound
};

// The documented bound (docs/gpu.md): the two baselines differ only where a transcendental
// (glibc's expf/logf/tanhf against correctly rounded ones) differs by an ulp, so an element
// may differ by one ulp of its stored type, plus what an ulp of a score, P or LSE moves it
// by: at most 64 operand roundings of the element's score-sensitive magnitude.
void agree(const Tensor& gpu, const Tensor& cpu, const Tensor* sens, double u_store, double u_op, Agreement& a, const std::string& what) {
  ASSERT_EQ(gpu.shape, cpu.shape) << what;
  for (size_t i = 0; i < cpu.numel(); ++i) {
    const double x = gpu.data[i], y = cpu.data[i];
    ++a.elements;
    if (std::memcmp(&x, &y, sizeof x) == 0 || (x == y)) {
      ++a.identical;
      continue;
    }
    if (std::isinf(x) || std::isinf(y) || std::isnan(x) || std::isnan(y)) {
      ADD_FAILURE() << what << " element " << i << ": " << x << " vs " << y;
      continue;
    }
    const double m = sens ? sens->data[i] : std::max(1.0, std::fabs(y));
    const double bound = 2 * u_store * std::fabs(y) + 64 * u_op * m + 1e-300;
    a.worst_ratio = std::max(a.worst_ratio, std::fabs(x - y) / bound);
  }
}

// Every contract and order on every case: every element is held to the bound; the share of
// bit-identical elements is judged on the cases without a softcap (glibc's tanhf is off by an
// ulp on about a tenth of the scores).
void expect_agreement(const std::vector<Case>& cases) {
  std::map<std::string, Agreement> by_tensor, no_softcap;
  for (const Case& c : cases) {
    const Inputs in = generate_inputs(c);
    const Problem p = full_problem(c, in);
    const Forward ref = reference_forward(p);
    const Sensitivity sens = sensitivity(p, ref, in.d_out, in.d_lse);
    for (Contract k : {Contract::fp64, Contract::fp32, Contract::tf32x3, Contract::tf32, Contract::fp16, Contract::bf16})
      for (bool reversed : {false, true}) {
        EmulatedBackend cpu(k, reversed);
        CudaEmulatedBackend gpu(k, reversed);
        const Forward fc = cpu.forward(p), fg = gpu.forward(p);
        // The same forward into both backwards, so that D = rowsum(dO * O) starts equal.
        const Gradients gc = cpu.backward(p, fc, in.d_out, in.d_lse), gg = gpu.backward(p, fc, in.d_out, in.d_lse);
        const double u_store = k == Contract::fp64 ? std::ldexp(1.0, -53) : unit_roundoff(c.dtype);
        const double u_op = std::max(unit_roundoff_of(k), k == Contract::fp64 ? 0.0 : std::ldexp(1.0, -24));
        const std::string tag = std::string(to_string(k)) + (reversed ? ".reversed" : "");
        const std::string where = gpu.name() + " on\n" + write_case(c);
        // LSE takes no rounded operand of its own: only the scores' and an fp32 (or fp64) log.
        const double u_lse = k == Contract::fp64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
        for (auto* m : {&by_tensor, c.softcap ? nullptr : &no_softcap}) {
          if (!m) continue;
          agree(fg.o, fc.o, &sens.o, u_store, u_op, (*m)[tag + " O"], "O " + where);
          agree(fg.lse, fc.lse, nullptr, u_lse, u_lse, (*m)[tag + " LSE"], "LSE " + where);
          agree(gg.dq, gc.dq, &sens.dq, u_store, u_op, (*m)[tag + " dQ"], "dQ " + where);
          agree(gg.dk, gc.dk, &sens.dk, u_store, u_op, (*m)[tag + " dK"], "dK " + where);
          agree(gg.dv, gc.dv, &sens.dv, u_store, u_op, (*m)[tag + " dV"], "dV " + where);
        }
      }
  }
  auto share = [](const Agreement& a) { return static_cast<double>(a.identical) / static_cast<double>(std::max<size_t>(a.elements, 1)); };
  std::cout << "  contract/order tensor: bit-identical elements (all cases, without softcap), worst difference / bound\n";
  for (const auto& [tag, a] : by_tensor) {
    const Agreement& plain = no_softcap[tag];
    std::printf("  %-22s %8.4f%% %8.4f%%  %.3g\n", tag.c_str(), 100.0 * share(a), 100.0 * share(plain), a.worst_ratio);
    EXPECT_LE(a.worst_ratio, 1.0) << tag << ": the GPU baseline is outside the documented bound";
    // A different order of rounding (a fused multiply-add, another summation order) would
    // change most elements; rare transcendental differences change few.
    EXPECT_GE(share(plain), 0.5) << tag << ": too few elements bit-identical to the CPU emulation";
  }
}

// oracles/device_mirror.h: a device copy is found by the bytes it holds, wherever they live, and
// never stands in for bytes that changed. The tests give the mirror a budget for their duration,
// whatever ATTNFUZZ_DEVICE_MIRROR_MIB says.
class MirrorBudget {
 public:
  explicit MirrorBudget(size_t bytes) : before_(gpu::mirror_counts().budget_bytes) { gpu::set_mirror_budget(bytes); }
  ~MirrorBudget() { gpu::set_mirror_budget(before_); }

 private:
  size_t before_;
};

TEST(DeviceMirror, FindsACopyByItsBytesWhereverTheyLive) {
  REQUIRE_GPU();
  const MirrorBudget budget(size_t{256} << 20);
  std::vector<double> x(5003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(static_cast<double>(i % 97) - 48.0, -static_cast<int>(i % 11));
  const gpu::MirrorCounts before = gpu::mirror_counts();
  const gpu::SharedCopy a = gpu::device_copy(x.data(), x.size());
  EXPECT_EQ(gpu::device_copy(x.data(), x.size())->data(), a->data());
  std::vector<double> y = x;  // the same bytes at another address
  EXPECT_EQ(gpu::device_copy(y.data(), y.size())->data(), a->data());
  y[4001] = std::nextafter(y[4001], 1e300);  // one bit
  EXPECT_NE(gpu::device_copy(y.data(), y.size())->data(), a->data());
  EXPECT_NE(gpu::device_copy(x.data(), x.size() - 1)->data(), a->data());  // a prefix: other bytes
  const gpu::MirrorCounts after = gpu::mirror_counts();
  EXPECT_EQ(after.hits - before.hits, 2u);
  EXPECT_EQ(after.uploads - before.uploads, 3u);
}

TEST(DeviceMirror, FindsAnOracleOutputAndSendsAChangedInputAgain) {
  REQUIRE_GPU();
  const MirrorBudget budget(size_t{256} << 20);
  const Case c = edge_cases()[1];  // GQA, softcap, Dqk != Dv
  const Inputs in = generate_inputs(c);
  Problem p = full_problem(c, in);
  CudaReference64Backend gpu;
  const Forward f = gpu.forward(p);
  // The forward's output came down from the device: sending it back finds that copy.
  const gpu::MirrorCounts before = gpu::mirror_counts();
  const gpu::SharedCopy o = gpu::device_copy(f.o.ptr(), f.o.numel());
  EXPECT_EQ(gpu::mirror_counts().hits - before.hits, 1u);
  EXPECT_EQ(gpu::mirror_counts().uploads, before.uploads);
  // K changed in place, at the same address: the next call's answer is the new K's.
  p.k.data[17] += 0.25;
  const Forward f2 = gpu.forward(p);
  const Forward want = reference_forward(p);
  std::string problem;
  EXPECT_LE(relative_difference(f2.o, want.o, nullptr, &problem), 1e-12);
  EXPECT_TRUE(problem.empty()) << problem;
  EXPECT_NE(f2.o, f.o);
}

TEST(GpuEmulated, AgreesWithTheCpuEmulation) {
  REQUIRE_GPU();
  std::vector<Case> cases = edge_cases();
  for (const Case& c : random_cases(25, 9'100'000)) cases.push_back(c);
  expect_agreement(cases);
}

// The bias is added in the accumulation type after the softcap on both sides: the same bound.
TEST(GpuEmulated, AgreesWithTheCpuEmulationWithABias) {
  REQUIRE_GPU();
  std::vector<Case> cases = bias_cases();
  for (const Case& c : random_cases(15, 9'150'000, 1.0)) cases.push_back(c);
  expect_agreement(cases);
}

// The differential reaches the same verdicts with the GPU oracle set as with the CPU one:
// a correct backend passes under both, a backend with a planted 2% error in O fails under both.
class ScaledOutput final : public Backend {
 public:
  std::string name() const override { return "scaled_o"; }
  Forward forward(const Problem& p) override {
    Forward f = inner_.forward(p);
    for (double& x : f.o.data) x = round_to(p.dtype, x * 1.02);
    return f;
  }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return inner_.backward(p, f, d_out, d_lse);
  }
  std::optional<Contract> contract(DType d) const override { return natural_contract(d); }
  SupportEnvelope envelope() const override { return inner_.envelope(); }

 private:
  ReferenceBackend inner_;
};

void expect_same_verdicts(const std::vector<Case>& random) {
  const OracleSet cpu = make_oracles(Device::cpu), gpu = make_oracles(Device::cuda);
  EXPECT_EQ(gpu.reference->device(), Device::cuda);
  int planted_found = 0, cases = 0;
  for (const Case& c : random) {
    EmulatedBackend correct(natural_contract(c.dtype), false);
    ScaledOutput planted;
    for (Backend* be : std::vector<Backend*>{&correct, &planted}) {
      const DiffReport rc = run_differential(c, {be}, cpu), rg = run_differential(c, {be}, gpu);
      std::vector<std::string> sc, sg;
      for (const auto& f : rc.findings) sc.push_back(f.signature.to_string());
      for (const auto& f : rg.findings) sg.push_back(f.signature.to_string());
      EXPECT_EQ(sg, sc) << be->name() << "\n" << write_case(c);
      if (be == &planted) planted_found += !sg.empty();
    }
    ++cases;
  }
  EXPECT_GE(planted_found, cases / 2) << "the planted error went unnoticed too often to compare verdicts";
}

// With dK's via blocks on the GPU too (ATTNFUZZ_GPU_VIA_BLOCKS=1): without them the GPU set counts a
// dK block's rows as independent where the CPU set does not (harness/error_model.h, "D's error
// across key rows").
TEST(GpuOracleSet, JudgesLikeTheCpuSet) {
  REQUIRE_GPU();
  ::setenv("ATTNFUZZ_GPU_VIA_BLOCKS", "1", 1);
  expect_same_verdicts(random_cases(20, 9'200'000));
  ::unsetenv("ATTNFUZZ_GPU_VIA_BLOCKS");
}

TEST(GpuOracleSet, JudgesLikeTheCpuSetWithABias) {
  REQUIRE_GPU();
  ::setenv("ATTNFUZZ_GPU_VIA_BLOCKS", "1", 1);
  expect_same_verdicts(random_cases(20, 9'250'000, 1.0));
  ::unsetenv("ATTNFUZZ_GPU_VIA_BLOCKS");
}

}  // namespace
}  // namespace attnfuzz
