// A non-owning strided tensor view: how every op receives caller memory, so engine-owned
// buffers (vLLM's layouts included) are used in place.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "msa/types.h"

namespace msa {

constexpr int kMaxDims = 6;

struct TensorView {
  void* data = nullptr;  // address of element [0, ..., 0]; nullptr = "not given" for optional args
  DType dtype = DType::kF32;
  Device device = Device::cpu();
  int ndim = 0;
  int64_t shape[kMaxDims] = {0, 0, 0, 0, 0, 0};
  int64_t strides[kMaxDims] = {0, 0, 0, 0, 0, 0};  // in elements, may be any non-negative value

  bool defined() const { return data != nullptr; }
  int64_t numel() const;
  int64_t size(int d) const { return shape[d]; }
  int64_t stride(int d) const { return strides[d]; }
  // True when strides are the row-major strides of shape.
  bool is_contiguous() const;
  // Element offset of an index tuple (no bounds checks).
  int64_t offset(std::initializer_list<int64_t> idx) const;

  // Sub-view with index `i` fixed in dimension `d` (drops that dimension).
  TensorView select(int d, int64_t i) const;
  // Sub-view of [start, start + length) along dimension d.
  TensorView slice(int d, int64_t start, int64_t length) const;
  // View with dimensions reordered: result dim k is this view's dim perm[k].
  TensorView permute(std::initializer_list<int> perm) const;

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// A contiguous (row-major) view of `data`.
TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                       Device device = Device::cpu());
// A view with explicit element strides.
TensorView make_strided_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides,
                               Device device = Device::cpu());

}  // namespace msa
