// Deterministic CPU parallelism: work items [0, n) are cut into contiguous chunks, one per
// thread. Every item must be computed entirely by the thread that owns it, with no reduction
// across items, so results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "msa/types.h"

namespace msa {
namespace cpu {

// Upper bound on worker threads; per-thread scratch in CPU workspaces is sized for this many.
constexpr int kMaxThreads = 64;

// Threads a call with this stream uses: stream.cpu_threads (0 = hardware concurrency),
// clamped to [1, kMaxThreads].
int resolve_threads(const Stream& stream);

// parallel_for's untemplated part: call(fn, begin, end, thread) per chunk.
using ChunkFn = void (*)(const void* fn, int64_t begin, int64_t end, int thread);
Status run_chunks(int64_t n, const Stream& stream, ChunkFn call, const void* fn);

// Calls fn(begin, end, thread_index) for each chunk and returns when all are done. Every worker
// thread is started before any chunk runs, so when one cannot be created (the system is out of
// threads or memory) no chunk runs at all and the result is kInternal; nothing is thrown.
template <typename Fn>
[[nodiscard]] Status parallel_for(int64_t n, const Stream& stream, const Fn& fn) {
  return run_chunks(
      n, stream,
      [](const void* f, int64_t begin, int64_t end, int thread) {
        (*static_cast<const Fn*>(f))(begin, end, thread);
      },
      &fn);
}

}  // namespace cpu
}  // namespace msa
