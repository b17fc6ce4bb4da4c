// The runner's view of where buffers live: host memory for the CPU backend, CUDA device memory
// (through the CUDA runtime) for the CUDA backend. Stage timing uses host clocks on the CPU and
// CUDA events on the GPU.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "msa/types.h"

namespace msa {
namespace engine {

// Buffers are zero-filled and owned by the DeviceMemory that made them.
class DeviceMemory {
 public:
  explicit DeviceMemory(Device device);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  const Device& device() const { return device_; }
  // nullptr with a message in *status on failure.
  void* alloc(size_t bytes, Status* status);
  Status upload(void* dst, const void* src, size_t bytes);
  Status download(void* dst, const void* src, size_t bytes);
  // Waits for all work queued on the device (no-op on the CPU).
  Status synchronize();
  size_t bytes_allocated() const { return bytes_; }

 private:
  Device device_;
  std::vector<void*> blocks_;
  size_t bytes_ = 0;
};

// Memory a run on `device` can use: the machine's physical memory for the CPU, the free memory
// of the CUDA device.
Status device_capacity_bytes(const Device& device, size_t* bytes);

// "NVIDIA H200 (sm_90, 139.8 GiB)"; empty without CUDA or without that device.
std::string describe_cuda_device(int ordinal);

enum Stage : int {
  kStageActivations = 0,  // synthesising the fused q/k/v/index rows
  kStageMetadata,         // batch metadata op (and the upload of its inputs)
  kStageInsert,           // fused QK-norm + RoPE + KV insert op
  // The indexer and attention are timed per row kind: decode and prefill rows are separate op
  // calls (kernels of their own), and a step may have both.
  kStageIndexerDecode,     // index scores + top-k selection of the decode rows
  kStageIndexerPrefill,    // index scores + top-k selection of the prefill rows
  kStageAttentionDecode,   // attention of the decode rows (sparse, or dense on dense layers)
  kStageAttentionPrefill,  // attention of the prefill rows (sparse, or dense on dense layers)
  kStageReadback,          // output digests and fidelity samples
  kNumStages,
};

const char* stage_name(int stage);

using StageTimes = std::array<double, kNumStages>;  // milliseconds

class StageClock {
 public:
  explicit StageClock(const Device& device);
  ~StageClock();
  StageClock(const StageClock&) = delete;
  StageClock& operator=(const StageClock&) = delete;

  void start(int stage);
  void stop(int stage);
  // Totals per stage since the last call (waits for the device's events).
  Status collect(StageTimes* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace engine
}  // namespace msa
