// Test-only owned tensors: a host mirror for filling and reading values, and storage on the
// device under test (a separate allocation also for the CPU, so both backends are driven the
// same way: fill host, upload, run, download, compare).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "msa/tensor.h"

namespace msa {
namespace test {

// Raw device memory: malloc for the CPU, cudaMalloc for CUDA (test_memory_*.cc).
void* device_alloc(const Device& device, size_t bytes);
void device_free(const Device& device, void* p);
void copy_to_device(const Device& device, void* dst, const void* src, size_t bytes);
void copy_to_host(const Device& device, void* dst, const void* src, size_t bytes);
void device_memset(const Device& device, void* dst, int value, size_t bytes);
// True when the device can run kernels (always for the CPU).
bool device_usable(const Device& device);

class TestTensor {
 public:
  TestTensor() = default;
  // Contiguous tensor.
  TestTensor(DType dtype, std::vector<int64_t> shape, Device device);
  // Tensor with explicit strides over `storage_elems` elements of storage.
  TestTensor(DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides,
             int64_t storage_elems, Device device);
  ~TestTensor();
  TestTensor(TestTensor&& o) noexcept;
  TestTensor& operator=(TestTensor&& o) noexcept;
  TestTensor(const TestTensor&) = delete;
  TestTensor& operator=(const TestTensor&) = delete;

  TensorView view() const;  // on the device
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t numel() const;
  int64_t storage_elems() const { return storage_elems_; }
  Device device() const { return device_; }

  // Host mirror element access through the strided layout, converting to/from double
  // (bf16/f16/e4m3 values are rounded to nearest even when set).
  double get(const std::vector<int64_t>& idx) const;
  void set(const std::vector<int64_t>& idx, double v);
  // Flat logical (row-major over shape) index access.
  double get_flat(int64_t i) const;
  void set_flat(int64_t i, double v);
  // Every element in flat order, as doubles (one pass over the layout; no per-element index).
  std::vector<double> values() const;
  // Sets every element, in flat order, to the next value of next() (called once per element).
  template <typename Next>
  void generate(Next&& next) {
    for_each_offset([&](int64_t off) { store_at(off, next()); });
  }
  // Raw host storage bytes (for bitwise comparison and exact-bit setting).
  std::vector<uint8_t>& host_bytes() { return host_; }
  const std::vector<uint8_t>& host_bytes() const { return host_; }

  void upload();         // host mirror -> device
  void download();       // device -> host mirror
  void poison_device();  // device storage <- 0xFF bytes (NaN for floats, -1 for ints)

  // Fills the host mirror with uniform values in [lo, hi) (rounded to the dtype).
  void fill_uniform(std::mt19937_64& rng, double lo, double hi);
  // Fills all storage bytes with a pattern (host mirror only).
  void fill_bytes(uint8_t b);

 private:
  // Calls f(storage offset) for every element in flat order: the innermost dimension in a plain
  // loop, the outer ones stepped like an odometer. Tests fill and copy caches of millions of
  // elements, where a division chain or an index vector per element dominated their run time.
  template <typename F>
  void for_each_offset(F&& f) const {
    if (numel() == 0) return;
    if (shape_.empty()) {
      f(0);
      return;
    }
    const size_t outer_rank = shape_.size() - 1;
    const int64_t inner = shape_.back(), inner_stride = strides_.back();
    std::vector<int64_t> idx(outer_rank, 0);
    int64_t base = 0;
    for (int64_t o = numel() / inner; o > 0; --o) {
      for (int64_t j = 0; j < inner; ++j) f(base + j * inner_stride);
      for (size_t k = outer_rank; k-- > 0;) {
        base += strides_[k];
        if (++idx[k] < shape_[k]) break;
        base -= strides_[k] * shape_[k];
        idx[k] = 0;
      }
    }
  }
  double load_at(int64_t off) const;
  void store_at(int64_t off, double v);
  int64_t storage_offset(const std::vector<int64_t>& idx) const;
  int64_t flat_to_storage(int64_t i) const;
  void release();

  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_, strides_;
  int64_t storage_elems_ = 0;
  Device device_;
  std::vector<uint8_t> host_;
  void* dev_ = nullptr;
};

// The device this test binary exercises: the CPU in msa_tests_cpu, CUDA device 0 in
// msa_tests_cuda (chosen at compile time by MSA_TEST_CUDA).
Device test_device();

}  // namespace test
}  // namespace msa

// Skips the current test with a message when the binary's device cannot run kernels.
#define MSA_REQUIRE_TEST_DEVICE()                                  \
  do {                                                             \
    if (!::msa::test::device_usable(::msa::test::test_device()))   \
      GTEST_SKIP() << "no usable CUDA device: CUDA tests skipped"; \
  } while (0)
