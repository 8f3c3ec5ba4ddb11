#pragma once
// Where one thread's wall time goes, on a machine without a profiler (the GPU machine): a POSIX
// timer signals the thread every `period_us` of wall time, whatever it is doing (computing,
// waiting on the GPU, joining threads), and the handler records its stack's return addresses
// into memory set aside up front. write() dumps them with /proc/self/maps, and
// bench/symbolize_samples.py names them with the unstripped binary (docs/gpu.md, "Harness
// speed"). Bench only: the signal interrupts system calls (SA_RESTART restarts most).
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>

namespace attnfuzz::bench {

class WallSampler {
 public:
  static constexpr int kDepth = 64;
  static constexpr size_t kMaxSamples = 50000;

  void start(long period_us) {
    void* warm[4];
    backtrace(warm, 4);  // loads the unwinder now, not inside the first signal
    struct sigaction sa {};
    sa.sa_handler = &WallSampler::on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGRTMIN + 3, &sa, nullptr);
    sigevent ev{};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGRTMIN + 3;
    ev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer_) != 0) return;
    itimerspec spec{};
    spec.it_interval.tv_sec = period_us / 1000000;
    spec.it_interval.tv_nsec = (period_us % 1000000) * 1000;
    spec.it_value = spec.it_interval;
    timer_settime(timer_, 0, &spec, nullptr);
    running_ = true;
  }

  void stop() {
    if (running_) timer_delete(timer_);
    running_ = false;
  }

  // One line per sample (hex return addresses, innermost first), then the process's maps.
  void write(const std::string& path) const {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return;
    const size_t n = std::min(count_.load(), kMaxSamples);
    for (size_t i = 0; i < n; ++i) {
      std::fprintf(f, "S");
      for (int d = 0; d < depth_[i]; ++d) std::fprintf(f, " %lx", reinterpret_cast<unsigned long>(stacks_[i][d]));
      std::fprintf(f, "\n");
    }
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) std::fprintf(f, "M %s\n", line.c_str());
    std::fclose(f);
  }

 private:
  static void on_signal(int) {
    const size_t i = count_.fetch_add(1);
    if (i < kMaxSamples) depth_[i] = backtrace(stacks_[i], kDepth);
  }

  timer_t timer_{};
  bool running_ = false;
  static inline void* stacks_[kMaxSamples][kDepth];
  static inline int depth_[kMaxSamples];
  static inline std::atomic<size_t> count_{0};
};

}  // namespace attnfuzz::bench
