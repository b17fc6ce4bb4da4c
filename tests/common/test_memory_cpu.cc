// Device memory for tests on builds without CUDA: only the CPU device exists.
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/test_tensor.h"

namespace msa {
namespace test {

namespace {
void require_cpu(const Device& d) {
  if (!d.is_cpu()) throw std::runtime_error("test memory: CUDA device in a CPU-only test build");
}
}  // namespace

void* device_alloc(const Device& device, size_t bytes) {
  require_cpu(device);
  // 256-byte alignment like cudaMalloc, so alignment-sensitive paths see the same addresses.
  return std::aligned_alloc(256, (bytes + 255) / 256 * 256);
}
void device_free(const Device&, void* p) { std::free(p); }
void copy_to_device(const Device& device, void* dst, const void* src, size_t bytes) {
  require_cpu(device);
  if (bytes) std::memcpy(dst, src, bytes);
}
void copy_to_host(const Device& device, void* dst, const void* src, size_t bytes) {
  require_cpu(device);
  if (bytes) std::memcpy(dst, src, bytes);
}
void device_memset(const Device& device, void* dst, int value, size_t bytes) {
  require_cpu(device);
  if (bytes) std::memset(dst, value, bytes);
}
bool device_usable(const Device& device) { return device.is_cpu(); }

}  // namespace test
}  // namespace msa
