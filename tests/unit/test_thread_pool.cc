// detail::parallel_for: every index is visited exactly once, by contiguous chunks, for any thread
// count (the basis of the CPU backend's thread-count-independent results), also when calls run
// concurrently or nest; a worker thread that cannot be created is a status, not an exception,
// and no chunk runs.
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "msa/fused_qknorm_rope.h"

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
      const Status st = parallel_for(n, stream, [&](int64_t begin, int64_t end, int thread) {
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
      EXPECT_TRUE(st.ok()) << st.to_string();
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
    const Status st = parallel_for(kN, stream, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) sum += i;
    });
    return st.ok() ? sum.load() : int64_t{-1};
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
  const Status st = parallel_for(8, stream, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) nested_good += sum_of_indices() == expected ? 1 : 0;
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
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

TEST(ParallelFor, ChunksOfHugeRangesDoNotOverflow) {
  // n * t would overflow int64; the chunk bounds must still be n * t / threads.
  const int64_t n = INT64_MAX - 1;
  std::vector<int64_t> begins(4, -1), ends(4, -1);
  Stream stream;
  stream.cpu_threads = 4;
  const Status st = parallel_for(n, stream, [&](int64_t begin, int64_t end, int thread) {
    begins[static_cast<size_t>(thread)] = begin;
    ends[static_cast<size_t>(thread)] = end;
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(begins[0], 0);
  for (size_t t = 1; t < 4; ++t) EXPECT_EQ(begins[t], ends[t - 1]);
  EXPECT_EQ(ends[3], n);
  EXPECT_EQ(begins[1], n / 4);
}

// While alive, creating a thread fails: the default stack size of new threads is larger than
// any address space (glibc's pthread_setattr_default_np), so std::thread throws
// std::system_error. The previous default is restored on destruction.
class NoNewThreads {
 public:
  NoNewThreads() {
    active_ = pthread_getattr_default_np(&saved_) == 0;
    pthread_attr_t huge;
    active_ = active_ && pthread_attr_init(&huge) == 0;
    active_ = active_ && pthread_attr_setstacksize(&huge, size_t{1} << 46) == 0 &&
              pthread_setattr_default_np(&huge) == 0;
  }
  ~NoNewThreads() { pthread_setattr_default_np(&saved_); }
  NoNewThreads(const NoNewThreads&) = delete;
  NoNewThreads& operator=(const NoNewThreads&) = delete;
  bool active() const { return active_; }

 private:
  pthread_attr_t saved_;
  bool active_ = false;
};

// A pool that must start workers for a call and cannot: the call reports it and runs nothing;
// the pool keeps working once threads can be created again.
TEST(ParallelFor, PoolWorkersThatCannotStartAreAStatus) {
  ThreadPool pool;
  std::atomic<int> calls{0};
  auto count = [&](int64_t, int64_t, int) { ++calls; };
  Stream stream;
  stream.cpu_threads = 4;
  Status st;
  {
    NoNewThreads guard;
    ASSERT_TRUE(guard.active());
    st = pool.parallel_for(100, stream, count);
  }
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.to_string();
  EXPECT_NE(st.message().find("worker thread 1 of 4"), std::string::npos) << st.to_string();
  EXPECT_EQ(calls.load(), 0) << "no chunk may run when a worker is missing";

  // A pool with one worker that needs three.
  stream.cpu_threads = 2;
  ASSERT_TRUE(pool.parallel_for(100, stream, count).ok());
  EXPECT_EQ(calls.exchange(0), 2);
  stream.cpu_threads = 4;
  {
    NoNewThreads guard;
    st = pool.parallel_for(100, stream, count);
  }
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.to_string();
  EXPECT_NE(st.message().find("worker thread 2 of 4"), std::string::npos) << st.to_string();
  EXPECT_EQ(calls.load(), 0);

  // A single thread needs no worker.
  stream.cpu_threads = 1;
  {
    NoNewThreads guard;
    st = pool.parallel_for(100, stream, count);
  }
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(calls.exchange(0), 1);

  stream.cpu_threads = 4;
  st = pool.parallel_for(100, stream, count);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(calls.load(), 4);
}

// A call made while the pool is busy starts threads of its own; when they cannot start, the call
// reports it and runs nothing.
TEST(ParallelFor, OwnThreadsThatCannotStartAreAStatus) {
  ThreadPool pool;
  std::atomic<int> calls{0};
  Stream outer, inner;
  outer.cpu_threads = 2;
  inner.cpu_threads = 4;
  Status nested;
  bool guarded = false;
  const Status st = pool.parallel_for(2, outer, [&](int64_t, int64_t, int thread) {
    if (thread != 0) return;
    NoNewThreads guard;
    guarded = guard.active();
    nested = pool.parallel_for(100, inner, [&](int64_t, int64_t, int) { ++calls; });
  });
  ASSERT_TRUE(guarded);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(nested.code(), StatusCode::kInternal) << nested.to_string();
  EXPECT_NE(nested.message().find("worker thread 1 of 4"), std::string::npos) << nested.to_string();
  EXPECT_EQ(calls.load(), 0) << "no chunk may run when a worker is missing";
}

// "Ops throw nothing": a CPU op whose worker threads cannot start returns kInternal and writes
// nothing. The op runs while the shared pool is busy, so it has to start threads of its own.
TEST(ParallelFor, OpsReturnTheStatusAndWriteNothing) {
  std::vector<float> table(64 * 8, 7.0f);
  RopeCacheArgs args;
  args.cos_sin_out = make_tensor(table.data(), DType::kF32, {64, 8});
  Stream stream, outer;
  stream.cpu_threads = 4;
  outer.cpu_threads = 2;
  Status st;
  bool guarded = false;
  const Status outer_st = parallel_for(2, outer, [&](int64_t, int64_t, int thread) {
    if (thread != 0) return;
    NoNewThreads guard;
    guarded = guard.active();
    st = run(args, Workspace{}, stream);
  });
  ASSERT_TRUE(guarded);
  EXPECT_TRUE(outer_st.ok()) << outer_st.to_string();
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.to_string();
  for (float x : table) ASSERT_EQ(x, 7.0f);
  EXPECT_TRUE(run(args, Workspace{}, stream).ok());
}

}  // namespace
}  // namespace detail
}  // namespace msa
