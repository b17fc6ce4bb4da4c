#include "core/thread_pool.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace msa {
namespace detail {
namespace {

// Workers wait for a job (a generation number that changes), take chunk indices from it until
// none is left, and the last to finish wakes the caller. One job at a time: try_run returns false
// while another is in progress.
class ThreadPool {
 public:
  // Runs task(t) for t in [1, chunks) on the pool (the caller runs chunk 0 itself, in between).
  bool try_run(int chunks, const std::function<void(int)>& task, const std::function<void()>& own) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (busy_) return false;
    busy_ = true;
    while (static_cast<int>(workers_.size()) < chunks - 1) {
      workers_.emplace_back([this] { work(); });
    }
    task_ = &task;
    next_ = 1;
    chunks_ = chunks;
    pending_ = chunks - 1;
    ++generation_;
    lock.unlock();
    wake_.notify_all();
    own();
    lock.lock();
    done_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
    busy_ = false;
    return true;
  }

 private:
  void work() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
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
  std::vector<std::thread> workers_;  // never joined: the pool lives until the process exits
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int next_ = 0, chunks_ = 0, pending_ = 0;
  bool busy_ = false;
};

ThreadPool& shared_pool() {
  static ThreadPool* pool = new ThreadPool;  // not destroyed: workers may still be waiting on it
  return *pool;
}

}  // namespace

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
  const std::function<void(int)> chunk = [&](int t) {
    fn(n * t / threads, n * (t + 1) / threads, t);
  };
  const std::function<void()> own = [&] { chunk(0); };
  if (shared_pool().try_run(threads, chunk, own)) return;
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) workers.emplace_back(chunk, t);
  chunk(0);
  for (auto& w : workers) w.join();
}

}  // namespace detail
}  // namespace msa
