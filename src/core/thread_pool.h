// Deterministic CPU parallelism shared by the CPU backend and the engine: work items [0, n) are
// cut into contiguous chunks, one per thread, run on a process-wide pool of worker threads.
// Every item must be computed entirely by the thread that owns it, with no reduction across
// items, so results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "msa/types.h"

namespace msa {
namespace detail {

// Upper bound on threads per call; per-thread scratch in CPU workspaces is sized for this many.
constexpr int kMaxThreads = 64;

// Threads a call with this stream uses: stream.cpu_threads (0 = hardware concurrency),
// clamped to [1, kMaxThreads].
int resolve_threads(const Stream& stream);

using ChunkFn = std::function<void(int64_t begin, int64_t end, int thread)>;

// Worker threads that serve one parallel_for at a time; started as calls need them and kept.
class ThreadPool {
 public:
  ThreadPool();
  ~ThreadPool();  // stops and joins the workers; no call may be in progress
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Calls fn(begin, end, thread) for chunk `thread` of resolve_threads(stream) (at most n)
  // chunks, chunk 0 on the calling thread and the others on this pool's workers; returns when
  // all are done. A call made while the pool serves another (a concurrent or nested call) runs
  // its other chunks on threads of its own instead, so calls never wait for each other.
  // Every thread a call needs is started before any chunk runs, so when one cannot be created
  // (the system is out of threads or memory) no chunk runs at all and the result is kInternal;
  // nothing is thrown.
  [[nodiscard]] Status parallel_for(int64_t n, const Stream& stream, const ChunkFn& fn);

 private:
  class Workers;
  std::unique_ptr<Workers> workers_;
};

// ThreadPool::parallel_for on the process-wide pool (never destroyed).
[[nodiscard]] Status parallel_for(int64_t n, const Stream& stream, const ChunkFn& fn);

}  // namespace detail
}  // namespace msa
