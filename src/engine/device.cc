#include "engine/device.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#if MSA_ENGINE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace msa {
namespace engine {
namespace {

#if MSA_ENGINE_CUDA
Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}
#endif

}  // namespace

const char* stage_name(int stage) {
  static const char* const kNames[kNumStages] = {
      "activations",      "metadata",          "insert",  "indexer_decode", "indexer_prefill",
      "attention_decode", "attention_prefill", "readback"};
  return stage >= 0 && stage < kNumStages ? kNames[stage] : "?";
}

std::string describe_cuda_device(int ordinal) {
#if MSA_ENGINE_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  char buf[320];
  std::snprintf(buf, sizeof(buf), "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return buf;
#else
  (void)ordinal;
  return "";
#endif
}

Status device_capacity_bytes(const Device& device, size_t* bytes) {
  if (device.is_cuda()) {
#if MSA_ENGINE_CUDA
    size_t free_bytes = 0, total_bytes = 0;
    const Status s = cuda_status(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    if (!s.ok()) return s;
    *bytes = free_bytes;
    return Status::Ok();
#else
    return Status(StatusCode::kNotSupported, "this build of msa has no CUDA backend");
#endif
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) {
    return Status(StatusCode::kInternal, "cannot read the machine's memory size (sysconf)");
  }
  *bytes = static_cast<size_t>(pages) * static_cast<size_t>(page_size);
  return Status::Ok();
}

DeviceMemory::DeviceMemory(Device device) : device_(device) {}

DeviceMemory::~DeviceMemory() {
  for (void* p : blocks_) {
#if MSA_ENGINE_CUDA
    if (device_.is_cuda()) {
      cudaFree(p);
      continue;
    }
#endif
    std::free(p);
  }
}

void* DeviceMemory::alloc(size_t bytes, Status* status) {
  bytes = bytes == 0 ? 256 : (bytes + 255) / 256 * 256;
  void* p = nullptr;
  if (device_.is_cuda()) {
#if MSA_ENGINE_CUDA
    *status = cuda_status(cudaMalloc(&p, bytes), "cudaMalloc");
    if (status->ok()) *status = cuda_status(cudaMemset(p, 0, bytes), "cudaMemset");
    if (!status->ok()) {
      if (p != nullptr) cudaFree(p);
      *status = Status(StatusCode::kCudaError,
                       status->message() + " (" + std::to_string(bytes) + " bytes)");
      return nullptr;
    }
#else
    *status = Status(StatusCode::kNotSupported, "this build of msa has no CUDA backend");
    return nullptr;
#endif
  } else {
    // calloc: the kernel hands out zero pages lazily, so large caches cost nothing until used.
    p = std::calloc(1, bytes);
    if (p == nullptr) {
      *status = Status(StatusCode::kInternal,
                       "out of host memory allocating " + std::to_string(bytes) + " bytes");
      return nullptr;
    }
  }
  blocks_.push_back(p);
  bytes_ += bytes;
  *status = Status::Ok();
  return p;
}

Status DeviceMemory::upload(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
#if MSA_ENGINE_CUDA
  if (device_.is_cuda()) {
    return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
#endif
  std::memcpy(dst, src, bytes);
  return Status::Ok();
}

Status DeviceMemory::download(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
#if MSA_ENGINE_CUDA
  if (device_.is_cuda()) {
    return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }
#endif
  std::memcpy(dst, src, bytes);
  return Status::Ok();
}

Status DeviceMemory::synchronize() {
#if MSA_ENGINE_CUDA
  if (device_.is_cuda()) return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
  return Status::Ok();
}

struct StageClock::Impl {
  bool cuda = false;
  StageTimes totals{};
  std::array<std::chrono::steady_clock::time_point, kNumStages> started{};
#if MSA_ENGINE_CUDA
  struct Interval {
    int stage;
    cudaEvent_t begin;
    cudaEvent_t end;
  };
  std::vector<Interval> open;      // recorded this step, not yet collected
  std::vector<cudaEvent_t> spare;  // reused across steps
  std::array<cudaEvent_t, kNumStages> pending{};

  cudaEvent_t take() {
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    cudaEventCreate(&e);
    return e;
  }
#endif
};

StageClock::StageClock(const Device& device) : impl_(new Impl) { impl_->cuda = device.is_cuda(); }

StageClock::~StageClock() {
#if MSA_ENGINE_CUDA
  for (auto& i : impl_->open) {
    cudaEventDestroy(i.begin);
    cudaEventDestroy(i.end);
  }
  for (cudaEvent_t e : impl_->spare) cudaEventDestroy(e);
#endif
}

void StageClock::start(int stage) {
#if MSA_ENGINE_CUDA
  if (impl_->cuda) {
    impl_->pending[static_cast<size_t>(stage)] = impl_->take();
    cudaEventRecord(impl_->pending[static_cast<size_t>(stage)], nullptr);
    return;
  }
#endif
  impl_->started[static_cast<size_t>(stage)] = std::chrono::steady_clock::now();
}

void StageClock::stop(int stage) {
#if MSA_ENGINE_CUDA
  if (impl_->cuda) {
    cudaEvent_t end = impl_->take();
    cudaEventRecord(end, nullptr);
    impl_->open.push_back({stage, impl_->pending[static_cast<size_t>(stage)], end});
    return;
  }
#endif
  const auto now = std::chrono::steady_clock::now();
  impl_->totals[static_cast<size_t>(stage)] +=
      std::chrono::duration<double, std::milli>(now - impl_->started[static_cast<size_t>(stage)])
          .count();
}

Status StageClock::collect(StageTimes* out) {
#if MSA_ENGINE_CUDA
  if (impl_->cuda) {
    for (auto& i : impl_->open) {
      cudaError_t e = cudaEventSynchronize(i.end);
      float ms = 0.0f;
      if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, i.begin, i.end);
      if (e != cudaSuccess) {
        return Status(StatusCode::kCudaError,
                      std::string("cudaEventElapsedTime: ") + cudaGetErrorString(e));
      }
      impl_->totals[static_cast<size_t>(i.stage)] += ms;
      impl_->spare.push_back(i.begin);
      impl_->spare.push_back(i.end);
    }
    impl_->open.clear();
  }
#endif
  *out = impl_->totals;
  impl_->totals = StageTimes{};
  return Status::Ok();
}

}  // namespace engine
}  // namespace msa
