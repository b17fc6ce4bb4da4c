#include "cpu/parallel.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

namespace msa {
namespace cpu {

int resolve_threads(const Stream& stream) {
  int n = stream.cpu_threads;
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(n, 1, kMaxThreads);
}

Status run_chunks(int64_t n, const Stream& stream, ChunkFn call, const void* fn) {
  if (n <= 0) return Status::Ok();
  const int threads = static_cast<int>(std::min<int64_t>(resolve_threads(stream), n));
  if (threads == 1) {
    call(fn, 0, n, 0);
    return Status::Ok();
  }
  // Chunk t is [n * t / threads, n * (t + 1) / threads), computed without forming n * t.
  const int64_t q = n / threads, r = n % threads;
  auto bound = [&](int64_t t) { return q * t + r * t / threads; };

  // Workers wait at a gate until every one of them exists; if creating one fails, the gate
  // tells the started ones to leave without running their chunk.
  enum class Gate { kWait, kRun, kAbort };
  std::mutex mutex;
  std::condition_variable opened;
  Gate gate = Gate::kWait;
  auto worker = [&](int t) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      opened.wait(lock, [&] { return gate != Gate::kWait; });
      if (gate == Gate::kAbort) return;
    }
    call(fn, bound(t), bound(t + 1), t);
  };
  std::array<std::thread, kMaxThreads> workers;
  int started = 1;
  std::string failure;
  try {
    for (; started < threads; ++started)
      workers[static_cast<size_t>(started)] = std::thread(worker, started);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    gate = failure.empty() ? Gate::kRun : Gate::kAbort;
  }
  opened.notify_all();
  if (failure.empty()) call(fn, bound(0), bound(1), 0);
  for (int t = 1; t < started; ++t) workers[static_cast<size_t>(t)].join();
  if (!failure.empty()) {
    return Status(StatusCode::kInternal,
                  "cpu backend: could not start worker thread " + std::to_string(started) + " of " +
                      std::to_string(threads) + " (" + failure + "); nothing was computed");
  }
  return Status::Ok();
}

}  // namespace cpu
}  // namespace msa
