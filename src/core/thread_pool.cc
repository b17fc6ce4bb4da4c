#include "core/thread_pool.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace msa {
namespace detail {
namespace {

Status start_failure(int thread, int threads, const char* what) {
  return Status(StatusCode::kInternal,
                "parallel_for: could not start worker thread " + std::to_string(thread) + " of " +
                    std::to_string(threads) + " (" + what + "); nothing was computed");
}

// Runs task(t) for t in [0, threads), t = 0 on the caller, on threads started for this call.
// They wait at a gate until every one of them exists; if creating one fails, the gate tells the
// started ones to leave without running their chunk.
Status run_on_own_threads(int threads, const std::function<void(int)>& task) {
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
    task(t);
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
  if (failure.empty()) task(0);
  for (int t = 1; t < started; ++t) workers[static_cast<size_t>(t)].join();
  if (!failure.empty()) return start_failure(started, threads, failure.c_str());
  return Status::Ok();
}

}  // namespace

// Workers wait for a job (a generation number that changes), take chunk indices from it until
// none is left, and the last to finish wakes the caller. One job at a time: try_run returns false
// while another is in progress.
class ThreadPool::Workers {
 public:
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : threads_) w.join();
  }

  // Runs task(t) for t in [1, chunks) on the workers (the caller runs chunk 0 itself, in
  // between) and sets *status; false, with nothing run, while another job holds the pool.
  bool try_run(int chunks, const std::function<void(int)>& task, Status* status) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (busy_) return false;
    // The workers the job needs exist before it is published: when one cannot be created, no
    // chunk runs (those created stay for later jobs).
    try {
      while (static_cast<int>(threads_.size()) < chunks - 1) {
        threads_.emplace_back([this] { work(); });
      }
    } catch (const std::exception& e) {
      *status = start_failure(static_cast<int>(threads_.size()) + 1, chunks, e.what());
      return true;
    }
    busy_ = true;
    task_ = &task;
    next_ = 1;
    chunks_ = chunks;
    pending_ = chunks - 1;
    ++generation_;
    lock.unlock();
    wake_.notify_all();
    task(0);
    lock.lock();
    done_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
    busy_ = false;
    *status = Status::Ok();
    return true;
  }

 private:
  void work() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      while (task_ != nullptr && next_ < chunks_) {
        const int t = next_++;
        const std::function<void(int)>* task = task_;
        lock.unlock();
        (*task)(t);
        lock.lock();
        if (--pending_ == 0) done_.notify_one();
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int next_ = 0, chunks_ = 0, pending_ = 0;
  bool busy_ = false, stop_ = false;
};

ThreadPool::ThreadPool() : workers_(new Workers) {}
ThreadPool::~ThreadPool() = default;

int resolve_threads(const Stream& stream) {
  int n = stream.cpu_threads;
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(n, 1, kMaxThreads);
}

Status ThreadPool::parallel_for(int64_t n, const Stream& stream, const ChunkFn& fn) {
  if (n <= 0) return Status::Ok();
  const int threads = static_cast<int>(std::min<int64_t>(resolve_threads(stream), n));
  if (threads == 1) {
    fn(0, n, 0);
    return Status::Ok();
  }
  // Chunk t is [n * t / threads, n * (t + 1) / threads), computed without forming n * t.
  const int64_t q = n / threads, r = n % threads;
  auto bound = [&](int64_t t) { return q * t + r * t / threads; };
  const std::function<void(int)> chunk = [&](int t) { fn(bound(t), bound(t + 1), t); };
  Status status;
  if (workers_->try_run(threads, chunk, &status)) return status;
  return run_on_own_threads(threads, chunk);
}

Status parallel_for(int64_t n, const Stream& stream, const ChunkFn& fn) {
  static ThreadPool* pool = new ThreadPool;  // not destroyed: workers may still be waiting on it
  return pool->parallel_for(n, stream, fn);
}

}  // namespace detail
}  // namespace msa
