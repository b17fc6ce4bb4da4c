// detail::parallel_for: every index is visited exactly once, by contiguous chunks, for any thread
// count (the basis of the CPU backend's thread-count-independent results), also when calls run
// concurrently or nest.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace msa {
namespace detail {
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

// Calls from several threads at once, and calls from inside a chunk, each cover their items once
// (the shared pool serves one at a time; the others use threads of their own).
TEST(ParallelFor, ConcurrentAndNestedCalls) {
  constexpr int64_t kN = 500;
  Stream stream;
  stream.cpu_threads = 4;
  auto sum_of_indices = [&] {
    std::atomic<int64_t> sum{0};
    parallel_for(kN, stream, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) sum += i;
    });
    return sum.load();
  };
  const int64_t expected = kN * (kN - 1) / 2;
  std::vector<std::thread> callers;
  std::atomic<int> good{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep) good += sum_of_indices() == expected ? 1 : 0;
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(good.load(), 80);

  std::atomic<int> nested_good{0};
  parallel_for(8, stream, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) nested_good += sum_of_indices() == expected ? 1 : 0;
  });
  EXPECT_EQ(nested_good.load(), 8);
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
}  // namespace detail
}  // namespace msa
