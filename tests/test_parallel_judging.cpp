// Judging over threads (harness/parallel.h: the error model per row, the verdict's elementwise
// pass and heads, the comparisons at once) reports the same bits as judging on one thread. Real
// sizes take the threaded paths; here the threshold is lowered so toy cases take them, split
// over 1, 2, 3 and 7 threads, and every number a verdict reports must be identical.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "generators/random_case.h"
#include "harness/differential.h"
#include "harness/parallel.h"
#include "oracles/emulated.h"
#include "backends/registry.h"

namespace attnfuzz {
namespace {

// Bitwise: -0.0 against 0.0 or two NaNs of different payloads would count as different.
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same(const ErrorStats& a, const ErrorStats& b, const std::string& where) {
  for (auto [x, y] : {std::pair{a.max_abs, b.max_abs}, {a.rel_fro, b.rel_fro}, {a.mean_abs, b.mean_abs}, {a.rms, b.rms},
                      {a.ref_max_abs, b.ref_max_abs}, {a.ref_rms, b.ref_rms}})
    EXPECT_TRUE(same_bits(x, y)) << where << ": " << x << " vs " << y;
  EXPECT_EQ(a.nonfinite_mismatch, b.nonfinite_mismatch) << where;
  EXPECT_EQ(a.count, b.count) << where;
}

void expect_same(const DiffReport& a, const DiffReport& b, const std::string& label) {
  ASSERT_EQ(a.runs.size(), b.runs.size()) << label;
  for (size_t r = 0; r < a.runs.size(); ++r) {
    const BackendRun &x = a.runs[r], &y = b.runs[r];
    ASSERT_EQ(x.tensors.size(), y.tensors.size()) << label;
    EXPECT_EQ(x.skipped, y.skipped) << label;
    for (size_t t = 0; t < x.tensors.size(); ++t) {
      const TensorVerdict &u = x.tensors[t], &v = y.tensors[t];
      const std::string where = label + " " + x.backend + " " + x.composition + " " + name_of(u.tensor);
      expect_same(u.err, v.err, where + " err");
      expect_same(u.baseline, v.baseline, where + " baseline");
      for (auto [p, q] : {std::pair{u.bound_rms, v.bound_rms}, {u.bound_max, v.bound_max}, {u.kappa, v.kappa}, {u.model_rms, v.model_rms},
                          {u.tensor_ratio, v.tensor_ratio}, {u.worst.ratio, v.worst.ratio}, {u.worst.limit, v.worst.limit},
                          {u.worst.n, v.worst.n}, {u.worst.dof, v.worst.dof}})
        EXPECT_TRUE(same_bits(p, q)) << where << ": " << p << " vs " << q;
      EXPECT_EQ(u.worst.granularity, v.worst.granularity) << where;
      EXPECT_EQ(u.worst.where, v.worst.where) << where;
      ASSERT_EQ(u.margin.size(), v.margin.size()) << where;
      for (const auto& [g, m] : u.margin) EXPECT_TRUE(v.margin.count(g) && same_bits(m, v.margin.at(g))) << where << " margin " << to_string(g);
      EXPECT_EQ(u.print.label, v.print.label) << where;
      EXPECT_EQ(u.pass, v.pass) << where;
    }
  }
  ASSERT_EQ(a.findings.size(), b.findings.size()) << label;
  for (size_t f = 0; f < a.findings.size(); ++f) {
    EXPECT_EQ(a.findings[f].signature, b.findings[f].signature) << label;
    EXPECT_EQ(a.findings[f].detail, b.findings[f].detail) << label;
    EXPECT_EQ(a.findings[f].metrics, b.findings[f].metrics) << label;
  }
}

// Restores the process's settings however the test ends.
struct ParallelOverride {
  size_t min_elements = parallel_settings().min_elements.load(), threads = parallel_settings().threads.load();
  ~ParallelOverride() {
    parallel_settings().min_elements = min_elements;
    parallel_settings().threads = threads;
  }
};

// A backend that computes under a coarser contract than it declares: failing verdicts, so the
// findings (and their fingerprints) are compared too, not only passes.
class Declares final : public Backend {
 public:
  Declares(Contract computes, Contract declares) : impl_(computes, false), declared_(declares) {}
  std::string name() const override { return "declares-" + std::string(to_string(declared_)); }
  std::optional<Contract> contract(DType) const override { return declared_; }
  Forward forward(const Problem& p) override { return impl_.forward(p); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return impl_.backward(p, f, d_out, d_lse);
  }

 private:
  EmulatedBackend impl_;
  Contract declared_;
};

// An exception in a thread of the loops reaches their caller (std::terminate would end the
// process): an out-of-memory there is the caller's to report, never a crash of the backend.
TEST(ParallelJudging, AnExceptionInAThreadReachesTheCaller) {
  ParallelOverride restore;
  parallel_settings().min_elements = 1;
  parallel_settings().threads = 4;
  EXPECT_THROW(parallel_for(100,
                            [](size_t begin, size_t) {
                              if (begin > 0) throw std::bad_alloc();
                            }),
               std::bad_alloc);
  EXPECT_THROW(parallel_tasks(3, true,
                              [](size_t i) {
                                if (i == 2) throw std::runtime_error("task 2");
                              }),
               std::runtime_error);
  std::vector<int> seen(100, 0);
  parallel_for(100, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) seen[i] += 1;
  });
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 100);  // every element once, whatever the split
}

// The pool's threads are kept from loop to loop: loops inside loops (a task's own parallel_for)
// and loops asked by several threads at once each run every item once, and a forked child
// (harness/isolated_call.cpp forks to isolate a call) gets threads of its own.
TEST(ParallelJudging, ThePoolRunsNestedConcurrentAndForkedLoops) {
  ParallelOverride restore;
  parallel_settings().min_elements = 1;
  parallel_settings().threads = 4;
  std::vector<std::atomic<int>> seen(64 * 64);
  parallel_tasks(64, true, [&](size_t t) {
    parallel_for(64, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) seen[t * 64 + i] += 1;
    });
  });
  std::vector<std::thread> askers;
  for (int a = 0; a < 3; ++a)
    askers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        parallel_for(seen.size(), [&](size_t begin, size_t end) {
          for (size_t i = begin; i < end; ++i) seen[i] += 1;
        });
    });
  for (auto& t : askers) t.join();
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](const std::atomic<int>& x) { return x.load() == 151; }));
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<size_t> sum{0};
    parallel_for(1000, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) sum += i;
    });
    ::_exit(sum.load() == 999 * 1000 / 2 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(ParallelJudging, ThreadedVerdictsAreTheSameBitsAsOneThread) {
  ParallelOverride restore;
  EmulatedBackend honest(Contract::bf16, true);
  Declares tf32_as_fp32(Contract::tf32, Contract::fp32), bf16_as_fp16(Contract::bf16, Contract::fp16);
  const std::vector<Backend*> backends{&honest, &tf32_as_fp32, &bf16_as_fp16};
  const RandomCaseOptions gen = RandomCaseOptions::for_tier(domain::SizeTier::toy);
  size_t findings = 0;
  for (uint64_t k = 0; k < 40; ++k) {
    const Case c = campaign_case(23, k, gen);
    DiffOptions opt;
    parallel_settings().min_elements = size_t{1} << 40;  // one thread
    const DiffReport serial = run_differential(c, backends, default_oracles(), opt);
    findings += serial.findings.size();
    for (size_t threads : {1, 2, 3, 7}) {
      parallel_settings().min_elements = 1;
      parallel_settings().threads = threads;
      expect_same(serial, run_differential(c, backends, default_oracles(), opt),
                  "case " + std::to_string(k) + ", " + std::to_string(threads) + " thread(s)");
    }
  }
  EXPECT_GT(findings, 0u);  // the failing paths were compared too
}

}  // namespace
}  // namespace attnfuzz
