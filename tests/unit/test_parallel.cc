// cpu::parallel_for: every index is visited exactly once, by contiguous chunks, for any thread
// count (the basis of the CPU backend's thread-count-independent results).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

#include "cpu/parallel.h"

namespace msa {
namespace cpu {
namespace {

TEST(ParallelFor, CoversEachIndexOnce) {
  for (int threads : {1, 2, 3, 8, 64, 100}) {
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
      for (auto& v : visits) v = 0;
      std::mutex mu;
      std::set<int> thread_ids;
      std::atomic<int> calls{0};
      Stream stream;
      stream.cpu_threads = threads;
      parallel_for(n, stream, [&](int64_t begin, int64_t end, int thread) {
        EXPECT_LE(0, begin);
        EXPECT_LE(begin, end);
        EXPECT_LE(end, n);
        ++calls;
        {
          std::lock_guard<std::mutex> lock(mu);
          EXPECT_TRUE(thread_ids.insert(thread).second) << "thread index reused";
        }
        for (int64_t i = begin; i < end; ++i) ++visits[static_cast<size_t>(i)];
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(visits[static_cast<size_t>(i)].load(), 1)
            << "threads " << threads << " n " << n << " index " << i;
      }
      const int64_t expected_calls = std::min<int64_t>(n, resolve_threads(stream));
      EXPECT_EQ(calls.load(), expected_calls) << "threads " << threads << " n " << n;
      for (int t : thread_ids) {
        EXPECT_GE(t, 0);
        EXPECT_LT(t, kMaxThreads);
      }
    }
  }
}

TEST(ParallelFor, ResolveThreadsClamps) {
  Stream s;
  s.cpu_threads = 100;
  EXPECT_EQ(resolve_threads(s), kMaxThreads);
  s.cpu_threads = 3;
  EXPECT_EQ(resolve_threads(s), 3);
  s.cpu_threads = 0;
  EXPECT_GE(resolve_threads(s), 1);
  EXPECT_LE(resolve_threads(s), kMaxThreads);
}

}  // namespace
}  // namespace cpu
}  // namespace msa
