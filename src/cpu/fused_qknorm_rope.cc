// CPU reference of the fused pre-attention op (spec A11, B5): per (token, head) Gemma RMSNorm
// and partial NeoX RoPE in fp32, rounded once to each output dtype, plus the K/V and index-key
// cache inserts. Every token is processed entirely by one thread, so the result does not depend
// on the thread count.
#include <cmath>
#include <cstdint>
#include <string>

#include "core/thread_pool.h"
#include "core/validate.h"
#include "msa/dtype.h"
#include "msa/fused_qknorm_rope.h"

namespace msa {
namespace cpu {

namespace {

float load(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kE4M3:
      return e4m3_to_float(static_cast<const uint8_t*>(base)[i]);
    case DType::kI32:
    case DType::kI64:
      break;
  }
  return 0.0f;
}

// Rounds once to the storage dtype (e4m3 saturates, as the contract requires).
void store(DType t, void* base, int64_t i, float x) {
  switch (t) {
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(x);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = float_to_f16(x);
      break;
    case DType::kF32:
      static_cast<float*>(base)[i] = x;
      break;
    case DType::kE4M3:
      static_cast<uint8_t*>(base)[i] = float_to_e4m3(x);
      break;
    case DType::kI32:
    case DType::kI64:
      break;
  }
}

int64_t load_index(const TensorView& t, int64_t i) {
  const int64_t off = i * t.strides[0];
  return t.dtype == DType::kI64 ? static_cast<const int64_t*>(t.data)[off]
                                : static_cast<const int32_t*>(t.data)[off];
}

// Where one head's normed and roped vector goes: a primary destination (in place in qkv or a
// separate output) and optionally a cache row with a divisor (the fp8 scale, 1 otherwise).
struct HeadDest {
  void* data = nullptr;
  DType dtype = DType::kBF16;
  void* cache = nullptr;
  DType cache_dtype = DType::kBF16;
  float cache_divisor = 1.0f;
};

// y = RoPE_p(GemmaNorm(x; w)) for one head of `dim` elements, written to `dest` (and the cache
// row when given). Each rotated pair (i, i + half) is read before it is written, so `dest.data`
// may alias `x`.
void norm_rope_head(const void* x, DType x_dtype, const TensorView& weight, int64_t dim, float eps,
                    int rotary_dim, const TensorView& cos_sin, int64_t position,
                    const HeadDest& dest) {
  float sum_sq = 0.0f;
  for (int64_t i = 0; i < dim; ++i) {
    const float v = load(x_dtype, x, i);
    sum_sq += v * v;
  }
  const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
  auto normed = [&](int64_t i) {
    const float w = load(weight.dtype, weight.data, i * weight.strides[0]);
    return load(x_dtype, x, i) * inv_rms * (1.0f + w);
  };
  auto emit = [&](int64_t i, float y) {
    store(dest.dtype, dest.data, i, y);
    if (dest.cache != nullptr) store(dest.cache_dtype, dest.cache, i, y / dest.cache_divisor);
  };
  const int64_t half = rotary_dim / 2;
  const int64_t row = position * cos_sin.strides[0];
  for (int64_t i = 0; i < half; ++i) {
    const float c = load(cos_sin.dtype, cos_sin.data, row + i * cos_sin.strides[1]);
    const float s = load(cos_sin.dtype, cos_sin.data, row + (half + i) * cos_sin.strides[1]);
    const float x1 = normed(i);
    const float x2 = normed(i + half);
    emit(i, x1 * c - x2 * s);
    emit(i + half, x2 * c + x1 * s);
  }
  for (int64_t i = rotary_dim; i < dim; ++i) emit(i, normed(i));
}

void* byte_offset(void* base, DType t, int64_t elems) {
  return static_cast<char*>(base) + elems * dtype_size(t);
}

// Row `t`, head `h` of a [T, heads, dim] or [T, heads * dim] output.
void* head_row(const TensorView& out, int64_t t, int64_t h, int64_t dim) {
  const int64_t off =
      out.ndim == 3 ? t * out.strides[0] + h * out.strides[1] : t * out.strides[0] + h * dim;
  return byte_offset(out.data, out.dtype, off);
}

float kv_divisor(const KvCacheView& c, const TensorView& scale, int64_t h, int64_t slot) {
  switch (c.scale_mode) {
    case KvScaleMode::kNone:
      return 1.0f;
    case KvScaleMode::kPerLayer:
      return static_cast<const float*>(scale.data)[0];
    case KvScaleMode::kPerTokenHead:
      return static_cast<const float*>(scale.data)[h * scale.strides[0] + slot * scale.strides[1]];
  }
  return 1.0f;
}

void* cache_row(const TensorView& cache, int64_t slot, int64_t h) {
  const int64_t bs = cache.shape[2];
  const int64_t off =
      (slot / bs) * cache.strides[0] + h * cache.strides[1] + (slot % bs) * cache.strides[2];
  return byte_offset(cache.data, cache.dtype, off);
}

void* index_cache_row(const TensorView& cache, int64_t slot) {
  const int64_t bs = cache.shape[1];
  const int64_t off = (slot / bs) * cache.strides[0] + (slot % bs) * cache.strides[1];
  return byte_offset(cache.data, cache.dtype, off);
}

void write_zero_row(const TensorView& out, int64_t t, int64_t heads, int64_t dim) {
  for (int64_t h = 0; h < heads; ++h) {
    void* row = head_row(out, t, h, dim);
    for (int64_t i = 0; i < dim; ++i) store(out.dtype, row, i, 0.0f);
  }
}

// Checks every position and slot of non-padding rows before anything is written. Padding rows
// (negative position) never read their slots, so garbage there is not an error.
Status validate_values(const FusedQkNormRopeArgs& args) {
  const bool sparse = args.mode == PreAttentionMode::kSparse;
  const int64_t tokens = args.qkv.shape[0];
  const int64_t max_pos = args.cos_sin_cache.shape[0];
  const TensorView& index_slots =
      args.index_slot_mapping.defined() ? args.index_slot_mapping : args.slot_mapping;
  const char* index_slots_name =
      args.index_slot_mapping.defined() ? "index_slot_mapping" : "slot_mapping";
  const bool index_insert = sparse && args.index_cache.defined();
  const int64_t kv_slots =
      args.kv_cache.defined() ? args.kv_cache.num_blocks() * args.kv_cache.block_size() : 0;
  const int64_t ic_slots = index_insert ? args.index_cache.shape[0] * args.index_cache.shape[1] : 0;

  int32_t flags = 0;
  Status first;
  auto fail = [&](int32_t bit, const std::string& msg) {
    flags |= bit;
    if (first.ok()) first = detail::out_of_range(msg);
  };
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t p = load_index(args.positions, t);
    if (p < 0) continue;
    if (p >= max_pos) {
      fail(kDeviceErrorPosition, "positions[" + std::to_string(t) + "] = " + std::to_string(p) +
                                     " is beyond the rope table (cos_sin_cache.shape[0] = " +
                                     std::to_string(max_pos) + ")");
    }
    if (args.kv_cache.defined()) {
      const int64_t s = load_index(args.slot_mapping, t);
      if (s >= kv_slots) {
        fail(kDeviceErrorSlot, "slot_mapping[" + std::to_string(t) + "] = " + std::to_string(s) +
                                   " is beyond the KV cache (num_blocks * block_size = " +
                                   std::to_string(kv_slots) + ")");
      }
    }
    if (index_insert) {
      const int64_t s = load_index(index_slots, t);
      if (s >= ic_slots) {
        fail(kDeviceErrorSlot, std::string(index_slots_name) + "[" + std::to_string(t) +
                                   "] = " + std::to_string(s) +
                                   " is beyond the index cache (num_blocks * block_size = " +
                                   std::to_string(ic_slots) + ")");
      }
    }
  }
  if (flags != 0 && args.error_flags.defined())
    *static_cast<int32_t*>(args.error_flags.data) |= flags;
  return first;
}

}  // namespace

Status workspace_size(const FusedQkNormRopeArgs&, size_t* bytes) {
  *bytes = 0;
  return Status::Ok();
}

Status run(const FusedQkNormRopeArgs& args, Workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(validate_values(args));

  const bool sparse = args.mode == PreAttentionMode::kSparse;
  const DType act = args.qkv.dtype;
  const int64_t nq = args.num_q_heads, nkv = args.num_kv_heads, niq = args.num_index_heads;
  const int64_t dim = args.q_norm_weight.shape[0];
  const int64_t index_dim = sparse ? args.index_q_norm_weight.shape[0] : dim;
  const int64_t k_begin = nq * dim, v_begin = (nq + nkv) * dim, iq_begin = (nq + 2 * nkv) * dim;
  const int64_t ik_begin = iq_begin + niq * index_dim;
  const KvCacheView& kv = args.kv_cache;
  const TensorView& index_slots =
      args.index_slot_mapping.defined() ? args.index_slot_mapping : args.slot_mapping;
  const bool index_insert = sparse && args.index_cache.defined();

  return detail::parallel_for(args.qkv.shape[0], stream, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t p = load_index(args.positions, t);
      if (p < 0) {
        if (args.q_out.defined()) write_zero_row(args.q_out, t, nq, dim);
        if (sparse && args.index_q_out.defined())
          write_zero_row(args.index_q_out, t, niq, index_dim);
        continue;
      }
      void* row = byte_offset(args.qkv.data, act, t * args.qkv.strides[0]);
      auto head = [&](int64_t begin_elem, int64_t h, int64_t d) {
        return byte_offset(row, act, begin_elem + h * d);
      };

      for (int64_t h = 0; h < nq; ++h) {
        HeadDest dest;
        dest.data = args.q_out.defined() ? head_row(args.q_out, t, h, dim) : head(0, h, dim);
        dest.dtype = act;
        norm_rope_head(head(0, h, dim), act, args.q_norm_weight, dim, args.eps, args.rotary_dim,
                       args.cos_sin_cache, p, dest);
      }

      const int64_t slot = kv.defined() ? load_index(args.slot_mapping, t) : -1;
      for (int64_t h = 0; h < nkv; ++h) {
        HeadDest dest;
        dest.data = head(k_begin, h, dim);
        dest.dtype = act;
        if (slot >= 0) {
          dest.cache = cache_row(kv.k, slot, h);
          dest.cache_dtype = kv.k.dtype;
          dest.cache_divisor = kv_divisor(kv, kv.k_scale, h, slot);
        }
        norm_rope_head(head(k_begin, h, dim), act, args.k_norm_weight, dim, args.eps,
                       args.rotary_dim, args.cos_sin_cache, p, dest);
        if (slot >= 0) {
          const void* v = head(v_begin, h, dim);
          void* dst = cache_row(kv.v, slot, h);
          const float divisor = kv_divisor(kv, kv.v_scale, h, slot);
          for (int64_t i = 0; i < dim; ++i) store(kv.v.dtype, dst, i, load(act, v, i) / divisor);
        }
      }

      if (!sparse) continue;
      for (int64_t h = 0; h < niq; ++h) {
        HeadDest dest;
        if (args.index_q_out.defined()) {
          dest.data = head_row(args.index_q_out, t, h, index_dim);
          dest.dtype = args.index_q_out.dtype;
        } else {
          dest.data = head(iq_begin, h, index_dim);
          dest.dtype = act;
        }
        norm_rope_head(head(iq_begin, h, index_dim), act, args.index_q_norm_weight, index_dim,
                       args.eps, args.rotary_dim, args.cos_sin_cache, p, dest);
      }
      HeadDest dest;
      dest.data = head(ik_begin, 0, index_dim);
      dest.dtype = act;
      const int64_t index_slot = index_insert ? load_index(index_slots, t) : -1;
      if (index_slot >= 0) {
        dest.cache = index_cache_row(args.index_cache, index_slot);
        dest.cache_dtype = args.index_cache.dtype;
      }
      norm_rope_head(head(ik_begin, 0, index_dim), act, args.index_k_norm_weight, index_dim,
                     args.eps, args.rotary_dim, args.cos_sin_cache, p, dest);
    }
  });
}

}  // namespace cpu
}  // namespace msa
