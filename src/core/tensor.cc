#include "msa/tensor.h"

#include <cstdint>

namespace msa {
namespace {

// A copy of `t` marked invalid: the data pointer is kept (an optional argument stays "given"),
// the rank says every check must reject it.
TensorView invalid_view(const TensorView& t) {
  TensorView r;
  r.data = t.data;
  r.dtype = t.dtype;
  r.device = t.device;
  r.ndim = kInvalidNdim;
  return r;
}

// `data` advanced by `index * stride` elements of `dtype`; false when the byte offset does not
// fit int64 or the address would wrap around the address space (computed on integers: a view is
// a description, and pointer arithmetic past any object would be undefined). A null pointer
// stays null (it marks an absent tensor).
bool advance(void* data, DType dtype, int64_t index, int64_t stride, void** out) {
  int64_t elems = 0, bytes = 0;
  if (__builtin_mul_overflow(index, stride, &elems) ||
      __builtin_mul_overflow(elems, dtype_size(dtype), &bytes)) {
    return false;
  }
  if (data == nullptr) {
    *out = nullptr;
    return true;
  }
  const auto base = reinterpret_cast<uintptr_t>(data);
  uintptr_t moved = 0;
  if (bytes >= 0 ? __builtin_add_overflow(base, static_cast<uintptr_t>(bytes), &moved)
                 : __builtin_sub_overflow(base, -static_cast<uintptr_t>(bytes), &moved)) {
    return false;
  }
  *out = reinterpret_cast<void*>(moved);
  return true;
}

}  // namespace

int64_t TensorView::numel() const {
  if (!valid_rank()) return -1;
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] < 0 || __builtin_mul_overflow(n, shape[d], &n)) return -1;
  }
  return n;
}

bool TensorView::is_contiguous() const {
  if (!valid_rank()) return false;
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    if (__builtin_mul_overflow(expected, shape[d], &expected)) return false;
  }
  return true;
}

int64_t TensorView::offset(std::initializer_list<int64_t> idx) const {
  int64_t off = 0;
  int d = 0;
  for (int64_t i : idx) {
    if (!valid_rank() || d >= ndim) break;
    off += i * strides[d++];
  }
  return off;
}

TensorView TensorView::select(int d, int64_t i) const {
  if (!valid_rank() || d < 0 || d >= ndim) return invalid_view(*this);
  TensorView r = *this;
  if (!advance(data, dtype, i, strides[d], &r.data)) return invalid_view(*this);
  for (int k = d; k + 1 < ndim; ++k) {
    r.shape[k] = shape[k + 1];
    r.strides[k] = strides[k + 1];
  }
  r.ndim = ndim - 1;
  r.shape[r.ndim] = 0;
  r.strides[r.ndim] = 0;
  return r;
}

TensorView TensorView::slice(int d, int64_t start, int64_t length) const {
  if (!valid_rank() || d < 0 || d >= ndim) return invalid_view(*this);
  TensorView r = *this;
  if (!advance(data, dtype, start, strides[d], &r.data)) return invalid_view(*this);
  r.shape[d] = length;
  return r;
}

TensorView TensorView::permute(std::initializer_list<int> perm) const {
  if (!valid_rank() || static_cast<int>(perm.size()) != ndim) return invalid_view(*this);
  TensorView r = *this;
  bool seen[kMaxDims] = {};
  int k = 0;
  for (int p : perm) {
    if (p < 0 || p >= ndim || seen[p]) return invalid_view(*this);
    seen[p] = true;
    r.shape[k] = shape[p];
    r.strides[k] = strides[p];
    ++k;
  }
  return r;
}

TensorView make_strided_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides, Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  if (shape.size() > static_cast<size_t>(kMaxDims) || strides.size() != shape.size()) {
    t.ndim = kInvalidNdim;
    return t;
  }
  t.ndim = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  d = 0;
  for (int64_t s : strides) t.strides[d++] = s;
  return t;
}

TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                       Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    t.ndim = kInvalidNdim;
    return t;
  }
  t.ndim = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  int64_t stride = 1;
  for (int k = t.ndim - 1; k >= 0; --k) {
    t.strides[k] = stride;
    if (__builtin_mul_overflow(stride, t.shape[k], &stride)) return invalid_view(t);
  }
  return t;
}

}  // namespace msa
