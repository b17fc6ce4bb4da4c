// Views of the paged caches (spec A6, A7, B4). Ops see the main cache as two strided 4-D views,
// K and V, each [num_blocks, num_kv_heads, block_size, head_dim], so the packed layout and the
// split NHD / HND layouts are all read and written in place through strides.
#pragma once

#include "msa/tensor.h"

namespace msa {

enum class KvScaleMode : int32_t {
  kNone = 0,          // plain cast (bf16/f16 caches must use this)
  kPerLayer = 1,      // one fp32 scalar each for K and V ([] or [1])
  kPerTokenHead = 2,  // fp32 [num_kv_heads, num_blocks * block_size], indexed [head, slot]
};

struct KvCacheView {
  TensorView k;  // [num_blocks, Hkv, block_size, head_dim] bf16 / f16 / e4m3, last stride 1
  TensorView v;  // same shape, dtype and device as k
  KvScaleMode scale_mode = KvScaleMode::kNone;
  TensorView k_scale;  // fp32, per scale_mode; stored = e4m3(x / scale), x ~= stored * scale
  TensorView v_scale;

  bool defined() const { return k.defined(); }
  int64_t num_blocks() const { return k.shape[0]; }
  int64_t num_kv_heads() const { return k.shape[1]; }
  int64_t block_size() const { return k.shape[2]; }
  int64_t head_dim() const { return k.shape[3]; }
};

// Packed (canonical) layout: cache [num_blocks, Hkv, block_size, 2 * head_dim], K in content
// dims [0, head_dim), V in [head_dim, 2 * head_dim). The strides of `cache` are honoured.
Status make_packed_kv_cache(const TensorView& cache, KvCacheView* out);

// Split layout: cache [num_blocks, 2, block_size, Hkv, head_dim] (logical NHD order, K at
// [:, 0], V at [:, 1]); the HND physical order [num_blocks, 2, Hkv, block_size, head_dim] is
// passed as the same logical shape with permuted strides.
Status make_split_kv_cache(const TensorView& cache, KvCacheView* out);

// Attaches scales. kPerLayer: k_scale/v_scale of shape [] or [1]; kPerTokenHead: shape
// [Hkv, num_blocks * block_size]; all fp32 on the cache's device.
Status set_kv_scales(KvCacheView* view, KvScaleMode mode, const TensorView& k_scale,
                     const TensorView& v_scale);

// Index-key cache: a TensorView [num_blocks, block_size, index_dim], bf16 or e4m3 (no scale:
// saturating cast), last stride 1. Slot = page * block_size + offset, as for the main cache.

}  // namespace msa
