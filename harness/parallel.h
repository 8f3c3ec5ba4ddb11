#pragma once
// Elementwise host loops of real-size cases over several threads. Only for work where every
// element is computed on its own (no sums across elements), so the result is the same bits
// whatever the split. Below kParallelMinElements one thread does it: toy and small cases, which
// a campaign already runs one per worker process, never start a thread.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
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

// The threads that run_jobs hands work to, started once and kept: a real-size case makes
// hundreds of parallel loops, and starting 16 threads for each (a stack mapped and unmapped each
// time) was a fifth of its wall time. The thread that asks runs a share of the jobs itself and,
// until its jobs are done, any job waiting in the queue. A job run by a pool thread that asks
// for parallel work runs it itself, in order (no thread then waits on jobs queued behind it).
// A forked child (harness/isolated_call.cpp) gets a pool of its own: the parent's threads are
// not in it.
class ThreadPool {
 public:
  static ThreadPool& instance() {
    static std::atomic<ThreadPool*> current{nullptr};
    ThreadPool* p = current.load();
    if (p && p->pid_ == ::getpid()) return *p;
    auto* fresh = new ThreadPool();  // never deleted: its threads wait until the process ends
    if (current.compare_exchange_strong(p, fresh)) return *fresh;  // p was null, or a parent's (left as it is)
    delete fresh;
    return *current.load();
  }

  // Runs every job, and rethrows the first exception any of them threw once all are done: one
  // that left a thread would end the process (std::terminate), and an out-of-memory there would
  // look like a crash of whatever ran.
  void run(const std::vector<std::function<void()>>& jobs) {
    Batch batch(jobs.size());
    if (jobs.size() <= 1 || in_pool_thread() || !start_threads(std::min(jobs.size(), parallel_threads()) - 1)) {
      for (size_t i = 0; i < jobs.size(); ++i) batch.run(jobs[i], i);
    } else {
      {
        std::lock_guard<std::mutex> lock(m_);
        for (size_t i = 1; i < jobs.size(); ++i) queue_.push_back({&jobs[i], &batch, i});
      }
      work_.notify_all();
      batch.run(jobs[0], 0);
      while (batch.remaining.load() > 0) {  // help with what is still queued, then wait
        Task t;
        {
          std::unique_lock<std::mutex> lock(m_);
          if (queue_.empty()) {
            batch_done_.wait(lock, [&] { return batch.remaining.load() == 0 || !queue_.empty(); });
            continue;
          }
          t = queue_.front();
          queue_.pop_front();
        }
        t.batch->run(*t.job, t.index);
        finished();
      }
    }
    for (const auto& e : batch.errors)
      if (e) std::rethrow_exception(e);
  }

 private:
  struct Batch {
    explicit Batch(size_t n) : remaining(n), errors(n) {}
    std::atomic<size_t> remaining;
    std::vector<std::exception_ptr> errors;
    void run(const std::function<void()>& job, size_t i) {
      try {
        job();
      } catch (...) {
        errors[i] = std::current_exception();
      }
      remaining.fetch_sub(1);
    }
  };
  struct Task {
    const std::function<void()>* job = nullptr;
    Batch* batch = nullptr;
    size_t index = 0;
  };

  ThreadPool() : pid_(::getpid()) {}
  static bool& in_pool_thread() {
    thread_local bool in_pool = false;
    return in_pool;
  }
  // At least n threads, or false where none could be started (the jobs then run on the caller).
  bool start_threads(size_t n) {
    std::lock_guard<std::mutex> lock(m_);
    try {
      while (threads_ < n) {
        std::thread([this] { serve(); }).detach();
        ++threads_;
      }
    } catch (const std::system_error&) {
    }
    return threads_ > 0;
  }
  void finished() {
    std::lock_guard<std::mutex> lock(m_);  // so that a waiter cannot miss the notification
    batch_done_.notify_all();
  }
  void serve() {
    in_pool_thread() = true;
    for (;;) {
      Task t;
      {
        std::unique_lock<std::mutex> lock(m_);
        work_.wait(lock, [&] { return !queue_.empty(); });
        t = queue_.front();
        queue_.pop_front();
      }
      t.batch->run(*t.job, t.index);
      finished();
    }
  }

  const pid_t pid_;
  std::mutex m_;
  std::condition_variable work_, batch_done_;
  std::deque<Task> queue_;
  size_t threads_ = 0;
};

// Runs every job (over the pool's threads and this one) and rethrows the first exception any
// of them threw once all are done. The jobs must not wait on each other: any of them may run
// after another on one thread.
inline void run_jobs(const std::vector<std::function<void()>>& jobs) { ThreadPool::instance().run(jobs); }

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
