#pragma once
// Elementwise host loops of real-size cases over several threads. Only for work where every
// element is computed on its own (no sums across elements), so the result is the same bits
// whatever the split. Below kParallelMinElements one thread does it: toy and small cases, which
// a campaign already runs one per worker process, never start a thread.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

namespace attnfuzz {

inline constexpr size_t kParallelMinElements = size_t{1} << 20;

// The work from which loops start threads, and how many they start: kParallelMinElements and
// the hardware's threads (at most 16), unless overridden. The environment's
// ATTNFUZZ_PARALLEL_MIN_ELEMENTS sets the first (bench/speed_digests.sh sets 1, so that the
// digest streams' toy cases take the threaded paths and their digests check them); tests set
// both (tests/test_parallel_judging.cpp).
struct ParallelSettings {
  std::atomic<size_t> min_elements{kParallelMinElements};
  std::atomic<size_t> threads{0};  // 0: the hardware's
};
inline ParallelSettings& parallel_settings() {
  static ParallelSettings s;
  static const bool from_environment = [] {
    if (const char* e = std::getenv("ATTNFUZZ_PARALLEL_MIN_ELEMENTS"); e && *e) s.min_elements = std::strtoull(e, nullptr, 10);
    return true;
  }();
  (void)from_environment;
  return s;
}
inline size_t parallel_min_elements() { return parallel_settings().min_elements.load(); }
inline size_t parallel_threads() {
  const size_t t = parallel_settings().threads.load();
  return t ? t : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
}

// Runs every job, jobs[1..] on threads of their own and jobs[0] on this one, and rethrows the
// first exception any of them threw once all are done: one that left a thread would end the
// process (std::terminate), and an out-of-memory there would look like a crash of whatever ran.
inline void run_jobs(const std::vector<std::function<void()>>& jobs) {
  std::vector<std::exception_ptr> errors(jobs.size());
  auto guarded = [&](size_t i) {
    try {
      jobs[i]();
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  try {
    for (size_t i = 1; i < jobs.size(); ++i) pool.emplace_back(guarded, i);
  } catch (...) {  // no thread could start: what did not start runs here
    for (size_t i = pool.size() + 1; i < jobs.size(); ++i) guarded(i);
  }
  if (!jobs.empty()) guarded(0);
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Calls f(begin, end) over disjoint ranges covering [0, n) of items that each cost about
// `elements_per_item` elements' work (a row of `width` elements: width), so that only work of
// kParallelMinElements or more starts threads.
template <class F>
void parallel_for(size_t n, size_t elements_per_item, F&& f) {
  const size_t threads = n * elements_per_item < parallel_min_elements() ? 1 : parallel_threads();
  if (threads == 1 || n <= 1) {
    f(size_t{0}, n);
    return;
  }
  const size_t chunk = (n + threads - 1) / threads;
  std::vector<std::function<void()>> jobs;
  for (size_t begin = 0; begin < n; begin += chunk) jobs.push_back([&f, begin, n, chunk] { f(begin, std::min(n, begin + chunk)); });
  run_jobs(jobs);
}

// Calls f(begin, end) over disjoint ranges covering [0, n) of single elements.
template <class F>
void parallel_for(size_t n, F&& f) {
  parallel_for(n, 1, std::forward<F>(f));
}

// Runs the tasks f(0), ..., f(n - 1) at once, one thread each, when `parallel` (work that is
// large enough to pay for the threads); otherwise one after another, in order.
template <class F>
void parallel_tasks(size_t n, bool parallel, F&& f) {
  if (!parallel || n <= 1) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::vector<std::function<void()>> jobs;
  for (size_t i = 0; i < n; ++i) jobs.push_back([&f, i] { f(i); });
  run_jobs(jobs);
}

}  // namespace attnfuzz
