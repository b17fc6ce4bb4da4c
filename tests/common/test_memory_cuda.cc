// Device memory for tests on builds with CUDA: CPU storage via malloc, CUDA via cudaMalloc.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/test_tensor.h"

namespace msa {
namespace test {

namespace {
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

void* device_alloc(const Device& device, size_t bytes) {
  if (device.is_cpu()) return std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  cuda_check(cudaSetDevice(device.index), "cudaSetDevice");
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
void device_free(const Device& device, void* p) {
  if (device.is_cpu()) {
    std::free(p);
  } else {
    cudaFree(p);
  }
}
void copy_to_device(const Device& device, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memcpy(dst, src, bytes);
  } else {
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
}
void copy_to_host(const Device& device, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memcpy(dst, src, bytes);
  } else {
    cuda_check(cudaDeviceSynchronize(), "kernel execution");
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }
}
void device_memset(const Device& device, void* dst, int value, size_t bytes) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memset(dst, value, bytes);
  } else {
    cuda_check(cudaMemset(dst, value, bytes), "cudaMemset");
  }
}
bool device_usable(const Device& device) {
  if (device.is_cpu()) return true;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return device.index < n;
}

}  // namespace test
}  // namespace msa
