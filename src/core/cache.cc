#include "msa/cache.h"

#include "core/validate.h"

namespace msa {

using detail::invalid;

Status make_packed_kv_cache(const TensorView& cache, KvCacheView* out) {
  MSA_RETURN_IF_ERROR(detail::require_ndim(cache, "cache", 4));
  if (cache.shape[3] % 2 != 0 || cache.shape[3] == 0) {
    return invalid(
        "cache: packed layout [num_blocks, Hkv, block_size, 2 * head_dim] needs an "
        "even, non-zero last dimension, got shape " +
        detail::shape_string(cache));
  }
  MSA_RETURN_IF_ERROR(detail::require_unit_last_stride(cache, "cache"));
  const int64_t d = cache.shape[3] / 2;
  KvCacheView v;
  v.k = cache.slice(3, 0, d);
  v.v = cache.slice(3, d, d);
  *out = v;
  return Status::Ok();
}

Status make_split_kv_cache(const TensorView& cache, KvCacheView* out) {
  MSA_RETURN_IF_ERROR(detail::require_ndim(cache, "cache", 5));
  MSA_RETURN_IF_ERROR(detail::require_dim(cache, "cache", 1, 2, "the K/V side count"));
  MSA_RETURN_IF_ERROR(detail::require_unit_last_stride(cache, "cache"));
  KvCacheView v;
  // [nb, 2, bs, Hkv, D] -> side s -> [nb, bs, Hkv, D] -> [nb, Hkv, bs, D]
  v.k = cache.select(1, 0).permute({0, 2, 1, 3});
  v.v = cache.select(1, 1).permute({0, 2, 1, 3});
  *out = v;
  return Status::Ok();
}

Status set_kv_scales(KvCacheView* view, KvScaleMode mode, const TensorView& k_scale,
                     const TensorView& v_scale) {
  if (view == nullptr) return invalid("view: null");
  view->scale_mode = mode;
  view->k_scale = k_scale;
  view->v_scale = v_scale;
  if (mode == KvScaleMode::kNone) return Status::Ok();
  return detail::check_kv_cache(*view, "kv_cache", view->k.device);
}

}  // namespace msa
