#include "msa/tensor.h"

namespace msa {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

int64_t TensorView::offset(std::initializer_list<int64_t> idx) const {
  int64_t off = 0;
  int d = 0;
  for (int64_t i : idx) off += i * strides[d++];
  return off;
}

TensorView TensorView::select(int d, int64_t i) const {
  TensorView r = *this;
  r.data = static_cast<char*>(data) + i * strides[d] * dtype_size(dtype);
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
  TensorView r = *this;
  r.data = static_cast<char*>(data) + start * strides[d] * dtype_size(dtype);
  r.shape[d] = length;
  return r;
}

TensorView TensorView::permute(std::initializer_list<int> perm) const {
  TensorView r = *this;
  int k = 0;
  for (int p : perm) {
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
  t.ndim = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  int64_t stride = 1;
  for (int k = t.ndim - 1; k >= 0; --k) {
    t.strides[k] = stride;
    stride *= t.shape[k];
  }
  return t;
}

}  // namespace msa
