// The device view of a paged KV cache (msa/cache.h): what a kernel that reads or writes the cache
// needs of it, set up once on the host by kv_cache_device. K and V are [num_blocks, Hkv,
// block_size, head_dim] through element strides (page, head, token; the last stride is 1), with
// the scales of their scale mode: per layer one fp32 each ([1]), per token and head [Hkv,
// num_blocks * block_size] through (head, slot) strides. Slot = page * block_size + token.
#pragma once

#include <cstdint>

#include "msa/cache.h"

namespace msa {
namespace cuda {

struct KvCacheDevice {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kBF16;  // K's and V's
  int64_t k_stride[3] = {0, 0, 0};
  int64_t v_stride[3] = {0, 0, 0};
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  KvScaleMode scale_mode = KvScaleMode::kNone;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int64_t k_scale_stride[2] = {0, 0};  // head, slot (per-token-head scales)
  int64_t v_scale_stride[2] = {0, 0};

  // Element offset of (page, head, token) in K or V.
  __host__ __device__ int64_t k_offset(int64_t page, int64_t head, int64_t tok) const {
    return page * k_stride[0] + head * k_stride[1] + tok * k_stride[2];
  }
  __host__ __device__ int64_t v_offset(int64_t page, int64_t head, int64_t tok) const {
    return page * v_stride[0] + head * v_stride[1] + tok * v_stride[2];
  }
  // The same for a slot.
  __host__ __device__ int64_t k_slot_offset(int64_t head, int64_t slot) const {
    return k_offset(slot / block_size, head, slot % block_size);
  }
  __host__ __device__ int64_t v_slot_offset(int64_t head, int64_t slot) const {
    return v_offset(slot / block_size, head, slot % block_size);
  }
  // Slots of the cache (valid slots are [0, slots())).
  __host__ __device__ int64_t slots() const { return num_blocks * block_size; }
  // The scale of K (is_v false) or V at (head, slot): stored = x / scale; 1 without scales.
  __device__ float scale(bool is_v, int64_t head, int64_t slot) const {
    const float* s = is_v ? v_scale : k_scale;
    if (scale_mode == KvScaleMode::kPerLayer) return s[0];
    if (scale_mode == KvScaleMode::kPerTokenHead) {
      return is_v ? s[head * v_scale_stride[0] + slot * v_scale_stride[1]]
                  : s[head * k_scale_stride[0] + slot * k_scale_stride[1]];
    }
    return 1.0f;
  }
};

// The device view of a validated cache view (core/validate.h's check_kv_cache).
inline KvCacheDevice kv_cache_device(const KvCacheView& kv) {
  KvCacheDevice d;
  d.k = kv.k.data;
  d.v = kv.v.data;
  d.dtype = kv.k.dtype;
  for (int i = 0; i < 3; ++i) {
    d.k_stride[i] = kv.k.strides[i];
    d.v_stride[i] = kv.v.strides[i];
  }
  d.num_blocks = kv.num_blocks();
  d.block_size = kv.block_size();
  d.scale_mode = kv.scale_mode;
  if (kv.scale_mode != KvScaleMode::kNone) {
    d.k_scale = kv.k_scale.ptr<const float>();
    d.v_scale = kv.v_scale.ptr<const float>();
  }
  if (kv.scale_mode == KvScaleMode::kPerTokenHead) {
    for (int i = 0; i < 2; ++i) {
      d.k_scale_stride[i] = kv.k_scale.strides[i];
      d.v_scale_stride[i] = kv.v_scale.strides[i];
    }
  }
  return d;
}

}  // namespace cuda
}  // namespace msa
