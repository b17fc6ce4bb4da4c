// Basic vocabulary of the msa API: element types, devices, status, streams and workspaces.
// Plain C++17; no CUDA or torch headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace msa {

// Element types of tensors the ops read and write.
enum class DType : int32_t {
  kBF16 = 0,
  kF16 = 1,
  kF32 = 2,
  kE4M3 = 3,  // OCP float8 e4m3fn: finite max 448, no infinities, NaN = S.1111.111
  kI32 = 4,
  kI64 = 5,
};

// Bytes per element.
constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kE4M3:
      return 1;
    case DType::kI64:
      return 8;
  }
  return 0;
}

// "bf16", "f16", "f32", "e4m3", "i32", "i64".
const char* dtype_name(DType t);

enum class DeviceType : int32_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static constexpr Device cpu() { return Device{DeviceType::kCPU, 0}; }
  static constexpr Device cuda(int ordinal = 0) { return Device{DeviceType::kCUDA, ordinal}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

enum class StatusCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,    // shape, dtype, stride, device or a host scalar is wrong
  kOutOfRange = 2,         // a value inside a tensor (block id, slot, length) is out of range
  kNotSupported = 3,       // valid request this build or backend does not implement
  kWorkspaceTooSmall = 4,  // workspace smaller than workspace_size() asked for
  kCudaError = 5,          // a CUDA runtime call failed
  kIoError = 6,            // a file could not be read or written
  kParseError = 7,         // malformed configuration text
  kInternal = 8,
};

const char* status_code_name(StatusCode c);

// Result of every API call. Messages name the offending argument and what was expected,
// e.g. "kv_cache.k: shape[2] is 64, expected the block size 128".
class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: q: ..." or "ok".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Execution context of one op call. For CUDA tensors, `cuda_stream` is the cudaStream_t the
// kernels are launched on (nullptr = the legacy default stream). For CPU tensors the op runs
// synchronously on the calling thread plus `cpu_threads - 1` workers (0 = all hardware threads);
// results are bitwise identical for every thread count.
struct Stream {
  void* cuda_stream = nullptr;
  int cpu_threads = 0;
};

// Caller-owned scratch memory on the op's device, at least workspace_size() bytes,
// aligned to 256 bytes. Contents need not be initialised and are not preserved between calls.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// Bits an op ORs into its optional `error_flags` tensor ([1] int32, on the op's device) when a
// value inside a tensor is out of range. On CUDA the offending item is skipped (nothing is
// written for it) and everything else is computed; on the CPU the op returns kOutOfRange and
// writes nothing but the flag. Flags are never cleared by an op.
enum DeviceError : int32_t {
  kDeviceErrorNone = 0,
  kDeviceErrorSlot = 1 << 0,      // slot_mapping entry >= num_blocks * block_size
  kDeviceErrorBlockId = 1 << 1,   // block_table entry outside [0, num_blocks)
  kDeviceErrorSeqLen = 1 << 2,    // sequence length negative or beyond the block table
  kDeviceErrorPosition = 1 << 3,  // position >= rope table length
  kDeviceErrorTopkId = 1 << 4,    // top-k id outside the row's visible blocks
  kDeviceErrorQueryLen = 1 << 5,  // query length / cu_seqlens inconsistent with the batch
  kDeviceErrorCapacity = 1 << 6,  // batch exceeds a declared capacity
};

}  // namespace msa
