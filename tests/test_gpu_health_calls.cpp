// When the differential asks whether the GPU is still usable (DiffOptions::gpu_health): after
// every run of a GPU backend that entered the backend's code (ran, declined the problem itself,
// or failed), and not after a run the skip policy refused before calling the backend at all
// (its dtype, no LSE), which launched nothing. Each ask is a device round trip; in a toy
// campaign most runs of a fused kernel are refused.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "harness/differential.h"
#include "oracles/reference.h"
#include "backends/registry.h"

namespace attnfuzz {
namespace {

Case small_case(DType d) {
  Case c;
  c.seed = 5;
  c.shape = {1, 2, 1, 12, 20, 8, 8};
  c.dtype = d;
  c.mask = MaskExpr::causal_mask(Align::top_left);
  c.composition.kind = Composition::Kind::q_split;  // two runs a backend: the single call and the split
  c.composition.bounds = {5};
  return c;
}

// Declares itself on a GPU; computes the reference for fp16 only, may decline every problem.
class FakeGpu final : public Backend {
 public:
  explicit FakeGpu(bool declines) : declines_(declines) {}
  std::string name() const override { return "fake-gpu"; }
  Device device() const override { return Device::cuda; }
  std::optional<Contract> contract(DType d) const override {
    return d == DType::f16 ? std::optional<Contract>(Contract::fp16) : std::nullopt;
  }
  std::optional<std::string> unsupported_reason(const Problem&) const override {
    ++asked;
    return declines_ ? std::optional<std::string>("declined") : std::nullopt;
  }
  Forward forward(const Problem& p) override { return ref_.forward(p); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return ref_.backward(p, f, d_out, d_lse);
  }
  mutable int asked = 0;

 private:
  bool declines_;
  ReferenceBackend ref_;
};

int health_checks(DType d, bool declines, int* asked = nullptr) {
  FakeGpu gpu(declines);
  DiffOptions opt;
  int checks = 0;
  opt.gpu_health = [&]() -> std::optional<std::string> {
    ++checks;
    return std::nullopt;
  };
  const DiffReport r = run_differential(small_case(d), {&gpu}, default_oracles(), opt);
  EXPECT_FALSE(r.gpu_error);
  if (asked) *asked = gpu.asked;
  return checks;
}

TEST(GpuHealthCalls, AfterEveryRunThatEnteredTheBackend) {
  int asked = 0;
  EXPECT_EQ(health_checks(DType::f16, false, &asked), 2);  // ran: single and split
  EXPECT_GT(asked, 0);
  EXPECT_EQ(health_checks(DType::f16, true, &asked), 2);  // declined by the backend itself: its code ran
  EXPECT_GT(asked, 0);
}

TEST(GpuHealthCalls, NotAfterRunsTheSkipPolicyRefused) {
  int asked = 0;
  EXPECT_EQ(health_checks(DType::f32, false, &asked), 0);  // no contract for fp32: never called
  EXPECT_EQ(asked, 0);
}

}  // namespace
}  // namespace attnfuzz
