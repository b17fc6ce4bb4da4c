// Deterministic CPU parallelism: work items [0, n) are cut into contiguous chunks, one per
// thread. Every item must be computed entirely by the thread that owns it, with no reduction
// across items, so results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>

#include "msa/types.h"

namespace msa {
namespace cpu {

// Upper bound on worker threads; per-thread scratch in CPU workspaces is sized for this many.
constexpr int kMaxThreads = 64;

// Threads a call with this stream uses: stream.cpu_threads (0 = hardware concurrency),
// clamped to [1, kMaxThreads].
int resolve_threads(const Stream& stream);

// Calls fn(begin, end, thread_index) for each chunk; returns when all are done.
void parallel_for(int64_t n, const Stream& stream,
                  const std::function<void(int64_t begin, int64_t end, int thread)>& fn);

}  // namespace cpu
}  // namespace msa
