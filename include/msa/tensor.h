// A non-owning strided tensor view: how every op receives caller memory, so engine-owned
// buffers (vLLM's layouts included) are used in place.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "msa/types.h"

namespace msa {

constexpr int kMaxDims = 6;
// The ndim of a view that make_tensor, make_strided_tensor, select, slice or permute could not
// build (more than kMaxDims dimensions, strides and shape of different lengths, a dimension or
// permutation outside the view's rank). Such a view keeps its data pointer, so an optional
// argument built this way is not mistaken for "not given"; every op's check() rejects it with
// kInvalidArgument.
constexpr int kInvalidNdim = -1;

struct TensorView {
  void* data = nullptr;  // address of element [0, ..., 0]; nullptr = "not given" for optional args
  DType dtype = DType::kF32;
  Device device = Device::cpu();
  int ndim = 0;
  int64_t shape[kMaxDims] = {0, 0, 0, 0, 0, 0};
  int64_t strides[kMaxDims] = {0, 0, 0, 0, 0, 0};  // in elements, may be any non-negative value

  bool defined() const { return data != nullptr; }
  // True when ndim is in [0, kMaxDims] (the helpers below return kInvalidNdim otherwise).
  bool valid_rank() const { return ndim >= 0 && ndim <= kMaxDims; }
  // Product of the shape; -1 when the rank is invalid, a dimension is negative or the product
  // does not fit int64.
  int64_t numel() const;
  int64_t size(int d) const { return shape[d]; }
  int64_t stride(int d) const { return strides[d]; }
  // True when strides are the row-major strides of shape (false for an invalid rank).
  bool is_contiguous() const;
  // Element offset of an index tuple (no bounds checks on the indices; entries past ndim are
  // ignored; 0 for an invalid rank).
  int64_t offset(std::initializer_list<int64_t> idx) const;

  // Sub-view with index `i` fixed in dimension `d` (drops that dimension). No bounds check on
  // `i`; a `d` outside [0, ndim) gives a view with ndim = kInvalidNdim.
  TensorView select(int d, int64_t i) const;
  // Sub-view of [start, start + length) along dimension d. No bounds checks on start and
  // length; a `d` outside [0, ndim) gives a view with ndim = kInvalidNdim.
  TensorView slice(int d, int64_t start, int64_t length) const;
  // View with dimensions reordered: result dim k is this view's dim perm[k]. A perm that is not
  // a permutation of [0, ndim) gives a view with ndim = kInvalidNdim.
  TensorView permute(std::initializer_list<int> perm) const;

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// A contiguous (row-major) view of `data`. More than kMaxDims dimensions, or a shape whose
// strides do not fit int64, give a view with ndim = kInvalidNdim.
TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                       Device device = Device::cpu());
// A view with explicit element strides. More than kMaxDims dimensions, or a strides list whose
// length differs from the shape's, give a view with ndim = kInvalidNdim.
TensorView make_strided_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides,
                               Device device = Device::cpu());

}  // namespace msa
