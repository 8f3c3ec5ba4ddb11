// Which oracle set judges a case (backends/registry.h, choose_oracle_device): the override
// wins, CPU backends get the CPU set, GPU backends the GPU set from kGpuOracleMinWork up and
// where the GPU set can run. The GPU half of the rule is checked wherever this runs: without a
// usable GPU (CI) a large case must fall back to the CPU set and say why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "oracles/reference.h"
#include "backends/registry.h"

namespace attnfuzz {
namespace {

// A backend that only says where it runs.
class On final : public Backend {
 public:
  explicit On(Device device) : device_(device) {}
  std::string name() const override { return "on." + std::string(to_string(device_)); }
  Device device() const override { return device_; }
  Forward forward(const Problem& p) override { return reference_forward(p); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return reference_backward(p, f, d_out, d_lse);
  }

 private:
  Device device_;
};

const Shape kSmall{1, 2, 2, 32, 32, 16, 16};        // 32768: below the floor
const Shape kLarge{1, 8, 8, 1088, 1088, 128, 128};  // ~1.2e9: far above it

bool gpu_set_runs_here() {
  try {
    make_oracles(Device::cuda);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

TEST(OracleChoice, CpuBackendsGetTheCpuSet) {
  On cpu(Device::cpu);
  std::string why;
  EXPECT_EQ(choose_oracle_device({&cpu}, kLarge, std::nullopt, &why), Device::cpu);
  EXPECT_NE(why.find("CPU"), std::string::npos) << why;
}

TEST(OracleChoice, SmallCasesStayOnTheCpuSet) {
  On cpu(Device::cpu), gpu(Device::cuda);
  std::string why;
  EXPECT_EQ(choose_oracle_device({&cpu, &gpu}, kSmall, std::nullopt, &why), Device::cpu);
  EXPECT_NE(why.find("small"), std::string::npos) << why;
}

TEST(OracleChoice, LargeGpuCasesGetTheGpuSetWhereItRuns) {
  On cpu(Device::cpu), gpu(Device::cuda);
  std::string why;
  const Device d = choose_oracle_device({&cpu, &gpu}, kLarge, std::nullopt, &why);
  EXPECT_EQ(d, gpu_set_runs_here() ? Device::cuda : Device::cpu) << why;
  EXPECT_NE(why.find("on.cuda"), std::string::npos) << why;
}

TEST(OracleChoice, TheOverrideWinsAndTravelsInTheEnvironment) {
  On cpu(Device::cpu), gpu(Device::cuda);
  EXPECT_EQ(choose_oracle_device({&gpu}, kLarge, Device::cpu), Device::cpu);
  EXPECT_EQ(choose_oracle_device({&cpu}, kSmall, Device::cuda), Device::cuda);
  set_oracle_device_override("cpu");
  EXPECT_EQ(oracle_device_override(), Device::cpu);
  EXPECT_STREQ(std::getenv("ATTNFUZZ_ORACLE_DEVICE"), "cpu");  // what worker processes inherit
  Device chosen = Device::cuda;
  oracles_for({&gpu}, kLarge, &chosen);
  EXPECT_EQ(chosen, Device::cpu);
  set_oracle_device_override("auto");
  EXPECT_EQ(oracle_device_override(), std::nullopt);
  EXPECT_THROW(set_oracle_device_override("gpu"), std::invalid_argument);
}

}  // namespace
}  // namespace attnfuzz
