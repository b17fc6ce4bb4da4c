#include "cpu/parallel.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace msa {
namespace cpu {

int resolve_threads(const Stream& stream) {
  int n = stream.cpu_threads;
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(n, 1, kMaxThreads);
}

void parallel_for(int64_t n, const Stream& stream,
                  const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(resolve_threads(stream), n));
  if (threads == 1) {
    fn(0, n, 0);
    return;
  }
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads - 1));
  auto chunk = [&](int t) {
    const int64_t begin = n * t / threads;
    const int64_t end = n * (t + 1) / threads;
    fn(begin, end, t);
  };
  for (int t = 1; t < threads; ++t) workers.emplace_back(chunk, t);
  chunk(0);
  for (auto& w : workers) w.join();
}

}  // namespace cpu
}  // namespace msa
