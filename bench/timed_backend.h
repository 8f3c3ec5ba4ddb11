#pragma once
// A backend whose forward and backward calls are timed into a ledger under a role
// ("reference", "baselines", "backends"); everything else is passed through unchanged, so a
// timed run judges exactly as an untimed one (bench_gpu_run, bench_case_rate).
#include <time.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "harness/backend.h"
#include "harness/verdict.h"

namespace attnfuzz::bench {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// This thread's CPU time in milliseconds: on a shared machine, the part of a role's time that
// is its own work (the wall time also holds the waits for other processes' turns).
inline double thread_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}

// Wall and CPU milliseconds per role, summed over whatever ran since the last clear().
inline std::map<std::string, double>& ledger() {
  static std::map<std::string, double> m;
  return m;
}
inline std::map<std::string, double>& cpu_ledger() {
  static std::map<std::string, double> m;
  return m;
}

// Adds the wall and CPU time of its lifetime to `role`.
class RoleTimer {
 public:
  explicit RoleTimer(std::string role) : role_(std::move(role)), wall0_(Clock::now()), cpu0_(thread_cpu_ms()) {}
  ~RoleTimer() {
    ledger()[role_] += ms_since(wall0_);
    cpu_ledger()[role_] += thread_cpu_ms() - cpu0_;
  }
  RoleTimer(const RoleTimer&) = delete;
  RoleTimer& operator=(const RoleTimer&) = delete;

 private:
  std::string role_;
  Clock::time_point wall0_;
  double cpu0_;
};

class Timed final : public Backend {
 public:
  Timed(std::shared_ptr<Backend> inner, std::string role) : inner_(std::move(inner)), role_(std::move(role)) {}
  std::string name() const override { return inner_->name(); }
  std::string version() const override { return inner_->version(); }
  Device device() const override { return inner_->device(); }
  std::optional<Contract> contract(DType d) const override { return inner_->contract(d); }
  bool masked_rows_zero() const override { return inner_->masked_rows_zero(); }
  bool returns_lse() const override { return inner_->returns_lse(); }
  double lse_unit_roundoff(DType d) const override { return inner_->lse_unit_roundoff(d); }
  bool accumulates_on_tensor_cores() const override { return inner_->accumulates_on_tensor_cores(); }
  SupportEnvelope envelope() const override { return inner_->envelope(); }
  std::optional<std::string> unsupported_reason(const Problem& p) const override { return inner_->unsupported_reason(p); }
  std::vector<TensorId> nondeterministic_outputs() const override { return inner_->nondeterministic_outputs(); }
  std::string why_nondeterministic() const override { return inner_->why_nondeterministic(); }
  bool backward_takes_dlse() const override { return inner_->backward_takes_dlse(); }
  const Merger* merger() const override { return inner_->merger(); }
  Forward forward(const Problem& p) override {
    RoleTimer t(role_);
    return inner_->forward(p);
  }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    RoleTimer t(role_);
    return inner_->backward(p, f, d_out, d_lse);
  }

 private:
  std::shared_ptr<Backend> inner_;
  std::string role_;
};

// A verdict reducer (harness/verdict.h) whose calls are timed under "verdict sums"; the sums
// are its inner reducer's.
class TimedReducer final : public VerdictReducer {
 public:
  explicit TimedReducer(std::unique_ptr<VerdictReducer> inner) : inner_(std::move(inner)) {}
  ErrorStats compare(const Tensor& a, const Tensor& ref, const std::vector<uint8_t>* skip_rows, double overflow) override {
    RoleTimer t("verdict sums");
    return inner_->compare(a, ref, skip_rows, overflow);
  }
  std::optional<VerdictSums> sums(const JudgeInput& in, const ToleranceRule& rule) override {
    RoleTimer t("verdict sums");
    return inner_->sums(in, rule);
  }

 private:
  std::unique_ptr<VerdictReducer> inner_;
};

}  // namespace attnfuzz::bench
