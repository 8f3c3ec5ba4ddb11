// LibTorch's varlen ops (backends/torch_varlen_cuda.h: torch.flash.varlen, torch.efficient.varlen)
// against the float64 reference on random ragged batches, through the same differential path as
// tests/test_gpu_backends.cpp; a planted fault in their output must be flagged; a mask or layout
// the ops cannot take is declined with a one-line reason (label gpu). The GPU tests skip, visibly
// and with the reason, without a GPU or a CUDA LibTorch; the tests of the adapter's own refusals
// (host code) run everywhere.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "backends/registry.h"
#include "backends/torch_varlen_cuda.h"
#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "harness/inputs.h"

namespace attnfuzz {
namespace {

// Makes the named backend into `var`, or skips the test with the registry's reason where it
// cannot run here; a name the registry does not know fails (make_backends throws).
#define MAKE_BACKEND_OR_SKIP(var, name)                              \
  do {                                                               \
    BackendSet made_ = make_backends({name}, WhenUnavailable::skip); \
    if (made_.owned.empty()) GTEST_SKIP() << made_.skipped.front();  \
    var = std::move(made_.owned.front());                            \
  } while (0)

const char* const kVarlenBackends[] = {"torch.flash.varlen", "torch.efficient.varlen"};

std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (ch == '.') ch = '_';
  return n;
}

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
  return c;
}
constexpr int kCases = 300;

// A stand-in with the backend's envelope and the adapter's own refusals (torch_varlen_refusal),
// whose forward and backward return zeros: with it the composition engine says, without a GPU,
// which runs the adapter accepts.
class RefusalProbe final : public Backend {
 public:
  explicit RefusalProbe(TorchVarlenOp op) : op_(op), real_(make_torch_varlen_backend(op)) {}
  std::string name() const override { return real_->name() + ".probe"; }
  std::optional<Contract> contract(DType d) const override { return real_->contract(d); }
  SupportEnvelope envelope() const override { return real_->envelope(); }
  bool backward_takes_dlse() const override { return false; }
  bool masked_rows_zero() const override { return false; }
  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    if (auto why = envelope().refusal(p)) return why;
    return torch_varlen_refusal(op_, p);
  }
  Forward forward(const Problem& p) override {
    const Shape& s = p.shape;
    return {Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}), Tensor({s.batch, s.heads_q, s.seq_q})};
  }
  Gradients backward(const Problem& p, const Forward&, const Tensor&, const Tensor&) override {
    const Shape& s = p.shape;
    return {Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}),
            Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v})};
  }

 private:
  TorchVarlenOp op_;
  std::unique_ptr<Backend> real_;
};

// The runs run_differential makes of a case (the single call, and the case's composition where
// it has one), as (composition, accepted by the probe).
std::vector<bool> probe_runs(Backend& probe, const Case& c, const Inputs& in) {
  std::vector<Composition> comps{Composition{}};
  if (!(c.composition == Composition{})) comps.push_back(c.composition);
  std::vector<bool> accepted;
  for (const Composition& comp : comps) {
    try {
      run_composition(probe, c, in, comp);
      accepted.push_back(true);
    } catch (const UnsupportedError&) {
      accepted.push_back(false);
    }
  }
  return accepted;
}

// Runs everywhere: of the runs the GPU test makes, the adapter's own checks (Q gaps, masks,
// head dims) accept more than half, so that test judges most of what it draws.
TEST(VarlenRefusal, AcceptsMostOfTheTestsRaggedCases) {
  for (const char* name : kVarlenBackends) {
    RefusalProbe probe(op_of(name));
    int runs = 0, accepted = 0;
    for (uint64_t seed = 0; seed < kCases; ++seed) {
      const Case c = varlen_case(seed);
      for (bool ok : probe_runs(probe, c, generate_inputs(c))) {
        ++runs;
        accepted += ok;
      }
    }
    std::cout << "  " << name << ": the adapter accepts " << accepted << " of " << runs << " runs\n";
    EXPECT_GT(accepted * 2, runs) << name;
  }
}

Problem problem_of(const Shape& s, const MaskExpr& mask, std::optional<Ragged> ragged, DType d = DType::f16) {
  Case c;
  c.seed = 41;
  c.shape = s;
  c.dtype = d;
  c.mask = mask;
  c.ragged = std::move(ragged);
  return full_problem(c, generate_inputs(c));
}

Ragged ragged_of(std::vector<int64_t> lq, std::vector<int64_t> lk, int64_t gap_q = 0, int64_t gap_kv = 0, int64_t tail = 0) {
  Ragged r;
  r.lens_q = std::move(lq);
  r.lens_kv = std::move(lk);
  r.gap_q = gap_q;
  r.gap_kv = gap_kv;
  r.tail = tail;
  return r;
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
  for (TorchVarlenOp op : {TorchVarlenOp::flash, TorchVarlenOp::efficient}) {
    // Every sequence's own bottom-right diagonal, K and V with gaps, a tail, an empty sequence.
    EXPECT_FALSE(torch_varlen_refusal(op, problem_of(s, MaskExpr::causal_mask(Align::bottom_right), lens)));
    EXPECT_FALSE(torch_varlen_refusal(op, problem_of(s, MaskExpr::all_visible(), lens)));
    EXPECT_FALSE(torch_varlen_refusal(op, problem_of(s, MaskExpr::all_visible(), std::nullopt)));  // a dense batch
    // Q with gaps: no seqused_q.
    expect_declined(op, problem_of(s, MaskExpr::all_visible(), ragged_of({40, 0, 17}, {9, 56, 30}, 3)), "gap_q = 3");
    // A mask no op computes: random, per head.
    MaskExpr random;
    random.kind = MaskExpr::Kind::random;
    random.density = 0.5;
    random.seed = 3;
    expect_declined(op, problem_of(s, random, lens), "declines the mask");
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

struct Tally {
  int runs = 0, ran = 0, cases = 0;
  std::map<std::string, int> skips;
};

// Each case through run_differential as test_gpu_backends.cpp judges them; every finding fails.
Tally judge_cases(Backend* be) {
  Tally t;
  for (uint64_t seed = 0; seed < kCases; ++seed) {
    const Case c = varlen_case(seed);
    DiffOptions dopt;
    dopt.gpu_health = gpu_health;
    const DiffReport r = run_differential(c, {be}, default_oracles(), dopt);
    ++t.cases;
    for (const auto& run : r.runs) {
      ++t.runs;
      if (run.skipped) {
        std::string why = run.skip_reason.substr(0, 200);  // grouped with the numbers left out
        for (char& ch : why)
          if (ch >= '0' && ch <= '9') ch = '#';
        ++t.skips[why];
      } else {
        ++t.ran;
      }
    }
    for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail << "\n" << write_case(c);
    if (r.gpu_error) {
      ADD_FAILURE() << "stopped after a GPU error (the CUDA context may be unusable); case seed " << c.seed << "\n" << write_case(c);
      break;
    }
  }
  for (const auto& [why, n] : t.skips) std::cout << "  skipped " << n << "x: " << why << "\n";
  std::cout << "  " << be->name() << ": ran " << t.ran << " of " << t.runs << " runs over " << t.cases << " ragged cases\n";
  return t;
}

class GpuVarlen : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuVarlen, NoFindingOnRaggedCases) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  const Tally t = judge_cases(be.get());
  // A backend that declined nearly everything would pass without testing anything.
  EXPECT_GT(t.ran * 2, t.runs) << GetParam() << " ran too few of the runs to say anything";
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
  const Inputs in = generate_inputs(c);
  const auto why = be->unsupported_reason(full_problem(c, in));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("declines the mask"), std::string::npos) << *why;
  EXPECT_EQ(why->find('\n'), std::string::npos) << *why;
  EXPECT_THROW(run_composition(*be, c, in, Composition{}), UnsupportedError);
  // The same case with each sequence's causal mask runs.
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  EXPECT_FALSE(be->unsupported_reason(full_problem(c, generate_inputs(c)))) << GetParam();
}

// The backend with a planted fault: one output element of a row that sees a key is moved by 0.5
// (where the case has one), everything else as the backend returns it.
class Planted final : public Backend {
 public:
  explicit Planted(Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name() + ".planted"; }
  Device device() const override { return inner_.device(); }
  std::optional<Contract> contract(DType d) const override { return inner_.contract(d); }
  SupportEnvelope envelope() const override { return inner_.envelope(); }
  std::optional<std::string> unsupported_reason(const Problem& p) const override { return inner_.unsupported_reason(p); }
  bool masked_rows_zero() const override { return inner_.masked_rows_zero(); }
  double lse_unit_roundoff(DType d) const override { return inner_.lse_unit_roundoff(d); }
  bool backward_takes_dlse() const override { return inner_.backward_takes_dlse(); }
  std::vector<TensorId> nondeterministic_outputs() const override { return inner_.nondeterministic_outputs(); }
  std::string why_nondeterministic() const override { return inner_.why_nondeterministic(); }
  Forward forward(const Problem& p) override {
    Forward f = inner_.forward(p);
    const Shape& s = p.shape;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t i = 0; i < p.call_len_q(b); ++i)
        for (int64_t j = 0; j < p.call_len_kv(b); ++j)
          if (p.visible(b, 0, i, j)) {
            *f.o.at(b, 0, i) += 0.5;
            planted = true;
            return f;
          }
    return f;
  }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return inner_.backward(p, f, d_out, d_lse);
  }
  bool planted = false;

 private:
  Backend& inner_;
};

// On a GPU: the same judging flags that fault in every case where it was planted.
TEST_P(GpuVarlen, FlagsAPlantedFault) {
  std::unique_ptr<Backend> be;
  MAKE_BACKEND_OR_SKIP(be, GetParam());
  int planted = 0, flagged = 0;
  for (uint64_t seed = 0; seed < 200 && planted < 20; ++seed) {
    const Case c = varlen_case(seed);
    Planted bad(*be);
    DiffOptions dopt;
    dopt.gpu_health = gpu_health;
    dopt.check_determinism = false;
    const DiffReport r = run_differential(c, {&bad}, default_oracles(), dopt);
    ASSERT_FALSE(r.gpu_error) << write_case(c);
    if (!bad.planted) continue;
    ++planted;
    const bool on_o = std::any_of(r.findings.begin(), r.findings.end(), [](const Finding& f) { return f.signature.tensor == TensorId::O; });
    flagged += on_o;
    EXPECT_TRUE(on_o) << "a planted error of 0.5 in O went unflagged\n" << write_case(c);
  }
  std::cout << "  planted in " << planted << " cases, flagged in " << flagged << "\n";
  EXPECT_GE(planted, 10);
}

INSTANTIATE_TEST_SUITE_P(Torch, GpuVarlen, ::testing::Values(kVarlenBackends[0], kVarlenBackends[1]), backend_param_name);

}  // namespace
}  // namespace attnfuzz
