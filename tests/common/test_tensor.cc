#include "common/test_tensor.h"

#include <cstring>
#include <stdexcept>

#include "msa/dtype.h"

namespace msa {
namespace test {

namespace {

std::vector<int64_t> row_major(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t st = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    s[k] = st;
    st *= shape[k];
  }
  return s;
}

}  // namespace

TestTensor::TestTensor(DType dtype, std::vector<int64_t> shape, Device device)
    : TestTensor(dtype, shape, row_major(shape), 0, device) {}

TestTensor::TestTensor(DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides,
                       int64_t storage_elems, Device device)
    : dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)), device_(device) {
  if (storage_elems == 0) {
    int64_t span = 1;
    for (size_t k = 0; k < shape_.size(); ++k) span += (shape_[k] - 1) * strides_[k];
    bool empty = false;
    for (int64_t s : shape_) empty = empty || s == 0;
    storage_elems = empty ? 0 : span;
  }
  storage_elems_ = storage_elems;
  const size_t bytes = static_cast<size_t>(storage_elems_ * dtype_size(dtype_));
  host_.assign(bytes, 0);
  dev_ = device_alloc(device_, bytes == 0 ? 1 : bytes);
}

TestTensor::~TestTensor() { release(); }

void TestTensor::release() {
  if (dev_ != nullptr) device_free(device_, dev_);
  dev_ = nullptr;
}

TestTensor::TestTensor(TestTensor&& o) noexcept { *this = std::move(o); }

TestTensor& TestTensor::operator=(TestTensor&& o) noexcept {
  if (this != &o) {
    release();
    dtype_ = o.dtype_;
    shape_ = std::move(o.shape_);
    strides_ = std::move(o.strides_);
    storage_elems_ = o.storage_elems_;
    device_ = o.device_;
    host_ = std::move(o.host_);
    dev_ = o.dev_;
    o.dev_ = nullptr;
  }
  return *this;
}

TensorView TestTensor::view() const {
  TensorView t;
  t.data = dev_;
  t.dtype = dtype_;
  t.device = device_;
  t.ndim = static_cast<int>(shape_.size());
  for (int d = 0; d < t.ndim; ++d) {
    t.shape[d] = shape_[d];
    t.strides[d] = strides_[d];
  }
  return t;
}

int64_t TestTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

int64_t TestTensor::storage_offset(const std::vector<int64_t>& idx) const {
  if (idx.size() != shape_.size()) throw std::invalid_argument("TestTensor: index rank");
  int64_t off = 0;
  for (size_t k = 0; k < idx.size(); ++k) {
    if (idx[k] < 0 || idx[k] >= shape_[k]) throw std::out_of_range("TestTensor: index");
    off += idx[k] * strides_[k];
  }
  return off;
}

int64_t TestTensor::flat_to_storage(int64_t i) const {
  int64_t off = 0;
  for (size_t k = shape_.size(); k-- > 0;) {
    off += (i % shape_[k]) * strides_[k];
    i /= shape_[k];
  }
  return off;
}

namespace {

double load(DType t, const uint8_t* p) {
  switch (t) {
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return bf16_to_float(b);
    }
    case DType::kF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return f16_to_float(b);
    }
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kE4M3:
      return e4m3_to_float(*p);
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
  }
  return 0;
}

void store(DType t, uint8_t* p, double v) {
  switch (t) {
    case DType::kBF16: {
      uint16_t b = float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &b, 2);
      break;
    }
    case DType::kF16: {
      uint16_t b = float_to_f16(static_cast<float>(v));
      std::memcpy(p, &b, 2);
      break;
    }
    case DType::kF32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::kE4M3:
      *p = float_to_e4m3(static_cast<float>(v));
      break;
    case DType::kI32: {
      int32_t i = static_cast<int32_t>(v);
      std::memcpy(p, &i, 4);
      break;
    }
    case DType::kI64: {
      int64_t i = static_cast<int64_t>(v);
      std::memcpy(p, &i, 8);
      break;
    }
  }
}

}  // namespace

double TestTensor::get(const std::vector<int64_t>& idx) const {
  return load(dtype_, host_.data() + storage_offset(idx) * dtype_size(dtype_));
}

void TestTensor::set(const std::vector<int64_t>& idx, double v) {
  store(dtype_, host_.data() + storage_offset(idx) * dtype_size(dtype_), v);
}

double TestTensor::get_flat(int64_t i) const { return load_at(flat_to_storage(i)); }

void TestTensor::set_flat(int64_t i, double v) { store_at(flat_to_storage(i), v); }

double TestTensor::load_at(int64_t off) const {
  return load(dtype_, host_.data() + off * dtype_size(dtype_));
}

void TestTensor::store_at(int64_t off, double v) {
  store(dtype_, host_.data() + off * dtype_size(dtype_), v);
}

std::vector<double> TestTensor::values() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  size_t i = 0;
  for_each_offset([&](int64_t off) { out[i++] = load_at(off); });
  return out;
}

void TestTensor::upload() { copy_to_device(device_, dev_, host_.data(), host_.size()); }

void TestTensor::download() { copy_to_host(device_, host_.data(), dev_, host_.size()); }

void TestTensor::poison_device() { device_memset(device_, dev_, 0xFF, host_.size()); }

void TestTensor::fill_uniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  generate([&] { return dist(rng); });
}

void TestTensor::fill_bytes(uint8_t b) { std::memset(host_.data(), b, host_.size()); }

Device test_device() {
#if MSA_TEST_CUDA
  return Device::cuda(0);
#else
  return Device::cpu();
#endif
}

}  // namespace test
}  // namespace msa
