#pragma once
// Elementwise host loops of real-size cases over several threads. Only for work where every
// element is computed on its own (no sums across elements), so the result is the same bits
// whatever the split. Below kParallelMinElements one thread does it: toy and small cases, which
// a campaign already runs one per worker process, never start a thread.
#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace attnfuzz {

inline constexpr size_t kParallelMinElements = size_t{1} << 20;

// Calls f(begin, end) over disjoint ranges covering [0, n).
template <class F>
void parallel_for(size_t n, F&& f) {
  const size_t threads = n < kParallelMinElements ? 1 : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  if (threads == 1) {
    f(size_t{0}, n);
    return;
  }
  const size_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (size_t begin = chunk; begin < n; begin += chunk) pool.emplace_back([&f, begin, n, chunk] { f(begin, std::min(n, begin + chunk)); });
  f(size_t{0}, std::min(n, chunk));
  for (auto& t : pool) t.join();
}

}  // namespace attnfuzz
