// CUDA backend of the fused pre-attention op (spec A11, B5): one warp per (token, head slot).
// Fast path (head_dim a multiple of 32, index_dim == head_dim, rotary_dim / 2 a multiple of
// V = head_dim / 32): each lane holds V contiguous dims and the NeoX partner (dim d +-
// rotary_dim / 2) is fetched with a shuffle from the lane holding it. General path (any dims up
// to 256): lane l holds dims l + 32 i and reads its partner from a per-warp shared-memory copy
// of the normed row. Either way the RMS is a warp-shuffle reduction, arithmetic is fp32 and each
// output is rounded once (the K cache gets y / scale from the fp32 y, like the CPU reference).
// Head slots of a token, in order:
//   q heads [0, nq) | k heads [nq, nq + nkv) | v inserts (nkv, only with a KV cache) |
//   index-q heads (niq) and the index key (1), in sparse mode only.
// Bad values are flagged and skipped: a position beyond the rope table is treated like a
// padding row (q_out / index_q_out zero, nothing else written); a slot beyond its cache skips
// that insert.
#include <algorithm>
#include <initializer_list>
#include <string>

#include "core/backends.h"
#include "core/validate.h"
#include "cuda/common.cuh"
#include "cuda/kv_cache.cuh"

namespace msa {
namespace cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

struct FusedParams {
  // qkv [T, W], last stride 1.
  void* qkv;
  DType act;
  int64_t qkv_s0;
  int64_t tokens;
  int nq, nkv, niq;
  int head_dim;   // q / k / v heads
  int index_dim;  // index-q heads and the index key (sparse mode)
  int rotary_dim;
  float eps;
  bool sparse;
  bool kv_insert;
  bool index_insert;
  int slots_per_token;
  int64_t k_begin, v_begin, iq_begin, ik_begin;  // element offsets of the segments in a row

  const void* positions;
  bool positions_i64;
  int64_t positions_s0;
  const void* cos_sin;
  DType cos_sin_dtype;
  int64_t cs_s0, cs_s1;
  int64_t max_pos;

  const void* w[4];  // q, k, index_q, index_k norm weights
  DType w_dtype[4];
  int64_t w_s0[4];

  const void* slots;
  bool slots_i64;
  int64_t slots_s0;
  KvCacheDevice kv;  // kv_insert

  const void* index_slots;
  bool index_slots_i64;
  int64_t index_slots_s0;
  void* index_cache;
  DType ic_dtype;
  int64_t ic_s0, ic_s1;
  int64_t ic_block_size, ic_slot_limit;

  void* q_out;  // qkv dtype
  int64_t qo_s0, qo_s1;
  void* iq_out;
  DType iq_dtype;
  int64_t iqo_s0, iqo_s1;

  // 16/8/4-byte vector access allowed (base and strides aligned to V elements).
  bool vec_qkv, vec_q_out, vec_iq_out, vec_kv, vec_ic;
  int32_t* error_flags;
};

// Rounds x once to the stored type (to_float, the way back, is in common.cuh).
__device__ __forceinline__ void from_float(float x, __nv_bfloat16* out) {
  *out = __float2bfloat16_rn(x);
}
__device__ __forceinline__ void from_float(float x, __half* out) { *out = __float2half_rn(x); }
__device__ __forceinline__ void from_float(float x, __nv_fp8_storage_t* out) {
  *out = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ void from_float(float x, float* out) { *out = x; }

template <int kBytes>
struct VecWord;
template <>
struct VecWord<4> {
  using type = uint32_t;
};
template <>
struct VecWord<8> {
  using type = uint2;
};
template <>
struct VecWord<16> {
  using type = uint4;
};

constexpr bool is_vec_width(int bytes) { return bytes == 4 || bytes == 8 || bytes == 16; }

// V contiguous elements as stored, as raw bits until to_floats converts them, once the loads
// that do not depend on them are issued too (ld_raw_* in common.cuh): one vector load when
// allowed, else V element loads. Each form keeps its own registers, so neither needs an unpack
// (which would wait for the loads) before to_floats.
template <typename T, int V>
struct RawRow {
  static constexpr int kBytes = static_cast<int>(sizeof(T)) * V;
  static constexpr bool kVec = is_vec_width(kBytes);
  uint32_t w[kVec ? kBytes / 4 : 1];  // vector form
  uint32_t e[V];                      // element form
  bool vec;
};
template <typename T, int V>
__device__ __forceinline__ RawRow<T, V> load_raw(const T* src, bool vec) {
  static_assert(sizeof(T) == 2, "16-bit activations");
  RawRow<T, V> r;
  r.vec = RawRow<T, V>::kVec && vec;
  if constexpr (RawRow<T, V>::kVec) {
    constexpr int kBytes = RawRow<T, V>::kBytes;
    if (r.vec) {
      if constexpr (kBytes == 4) {
        r.w[0] = ld_raw_u32(src);
      } else if constexpr (kBytes == 8) {
        const uint2 w = ld_raw_v2(src);
        r.w[0] = w.x;
        r.w[1] = w.y;
      } else {
        const uint4 w = ld_raw_v4(src);
        r.w[0] = w.x;
        r.w[1] = w.y;
        r.w[2] = w.z;
        r.w[3] = w.w;
      }
      return r;
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) r.e[i] = ld_raw_u16(src + i);
  return r;
}
template <typename T, int V>
__device__ __forceinline__ void to_floats(const RawRow<T, V>& r, float (&x)[V]) {
  uint16_t bits[V];
  bool from_words = false;
  if constexpr (RawRow<T, V>::kVec) {
    from_words = r.vec;
    if (from_words) memcpy(bits, r.w, sizeof(bits));
  }
  if (!from_words) {
#pragma unroll
    for (int i = 0; i < V; ++i) bits[i] = static_cast<uint16_t>(r.e[i]);
  }
#pragma unroll
  for (int i = 0; i < V; ++i) {
    T v;
    memcpy(&v, &bits[i], 2);
    x[i] = to_float(v);
  }
}

// V contiguous elements rounded once to T (y[i] / divisor); one vector store when allowed.
template <typename T, int V>
__device__ __forceinline__ void store_row(T* dst, bool vec, const float (&y)[V], float divisor) {
  T e[V];
#pragma unroll
  for (int i = 0; i < V; ++i) from_float(divisor == 1.0f ? y[i] : y[i] / divisor, &e[i]);
  constexpr int kBytes = static_cast<int>(sizeof(T)) * V;
  if constexpr (is_vec_width(kBytes)) {
    if (vec) {
      using W = typename VecWord<kBytes>::type;
      W w;
      memcpy(&w, e, kBytes);
      *reinterpret_cast<W*>(dst) = w;
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) dst[i] = e[i];
}

// store_row for a runtime storage dtype; `elem` is the element offset from `base`.
template <int V>
__device__ __forceinline__ void store_row_dt(void* base, DType dt, int64_t elem, bool vec,
                                             const float (&y)[V], float divisor) {
  switch (dt) {
    case DType::kBF16:
      store_row<__nv_bfloat16, V>(static_cast<__nv_bfloat16*>(base) + elem, vec, y, divisor);
      break;
    case DType::kF16:
      store_row<__half, V>(static_cast<__half*>(base) + elem, vec, y, divisor);
      break;
    case DType::kE4M3:
      store_row<__nv_fp8_storage_t, V>(static_cast<__nv_fp8_storage_t*>(base) + elem, vec, y,
                                       divisor);
      break;
    default:
      store_row<float, V>(static_cast<float*>(base) + elem, vec, y, divisor);
      break;
  }
}

template <int V>
__device__ __forceinline__ void zero_row_dt(void* base, DType dt, int64_t elem, bool vec) {
  float z[V];
#pragma unroll
  for (int i = 0; i < V; ++i) z[i] = 0.0f;
  store_row_dt<V>(base, dt, elem, vec, z, 1.0f);
}

// The Gemma norm weights of this lane's V dims of head kind `which_w`, as raw bits
// (raw_elems_to_floats with p.w_dtype[which_w] converts them).
template <int V>
__device__ __forceinline__ void load_norm_weights(const FusedParams& p, int which_w,
                                                  uint32_t (&raw)[V]) {
  const int first = (threadIdx.x % 32) * V;
  int64_t w_idx[V];
#pragma unroll
  for (int i = 0; i < V; ++i) w_idx[i] = (first + i) * p.w_s0[which_w];
  ld_raw_elems<V>(p.w[which_w], p.w_dtype[which_w], w_idx, raw);
}

// In place: x (this lane's V dims of one head) <- RoPE_pos(GemmaNorm(x; w)), wv = this lane's
// norm weights (load_norm_weights).
template <int V>
__device__ __forceinline__ void norm_rope(const FusedParams& p, int64_t pos, const float (&wv)[V],
                                          float (&x)[V]) {
  const int lane = threadIdx.x % 32;
  // The partner of dim d = lane * V + i is d +- half, held by lane +- half / V at the same i
  // (the launcher requires half % V == 0). Every lane joins the shuffles. The cos/sin entries
  // are loaded in one batch as raw bits and converted after the RMS, which then overlaps their
  // round trip for every table dtype (converted inside the dtype switch that loaded them, a
  // 16-bit table's were waited for before it); lanes past the rotary dims load the entries of
  // f < V (in bounds) and ignore them.
  const int half = p.rotary_dim / 2;
  const int first = lane * V;
  const bool rotated = first < p.rotary_dim;
  const bool low = first < half;
  const int partner = rotated ? (low ? lane + half / V : lane - half / V) : lane;
  const int64_t row = pos * p.cs_s0;
  // Frequency f = d % half of dim d = first + i: first and half are multiples of V, so that is
  // f0 + i with f0 = first % half, found without a division (V of them, by a runtime divisor,
  // sat between the position's arrival and these loads).
  const int f0 = low ? first : rotated ? first - half : 0;
  int64_t cs_idx[2 * V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int f = f0 + i;
    cs_idx[i] = row + f * p.cs_s1;
    cs_idx[V + i] = row + (half + f) * p.cs_s1;
  }
  uint32_t cs_raw[2 * V];
  ld_raw_elems<2 * V>(p.cos_sin, p.cos_sin_dtype, cs_idx, cs_raw);
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(p.head_dim) + p.eps);
#pragma unroll
  for (int i = 0; i < V; ++i) x[i] = __fmul_rn(__fmul_rn(x[i], inv_rms), __fadd_rn(1.0f, wv[i]));
  float cs[2 * V];
  raw_elems_to_floats<2 * V>(p.cos_sin_dtype, cs_raw, cs);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const float other = __shfl_sync(0xffffffffu, x[i], partner);
    if (rotated) {
      const float c = cs[i], s = cs[V + i];
      x[i] = low ? __fsub_rn(__fmul_rn(x[i], c), __fmul_rn(other, s))
                 : __fadd_rn(__fmul_rn(x[i], c), __fmul_rn(other, s));
    }
  }
}

enum SlotKind { kQ, kK, kV, kIQ, kIK };

// What head slot s (in [0, slots_per_token)) of a token is, and its head index within the kind.
__device__ __forceinline__ SlotKind decode_slot(const FusedParams& p, int s, int* h) {
  if (s < p.nq) {
    *h = s;
    return kQ;
  }
  s -= p.nq;
  if (s < p.nkv) {
    *h = s;
    return kK;
  }
  s -= p.nkv;
  if (p.kv_insert) {
    if (s < p.nkv) {
      *h = s;
      return kV;
    }
    s -= p.nkv;
  }
  *h = s < p.niq ? s : 0;
  return s < p.niq ? kIQ : kIK;
}

template <typename T, int V>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) fused_qknorm_rope_kernel(FusedParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t t = blockIdx.x;  // the grid (launch): no division before the first loads
  const int slot_index = static_cast<int>(blockIdx.y) * kWarpsPerBlock + threadIdx.x / 32;
  if (slot_index >= p.slots_per_token) return;  // warp-uniform, like every branch below

  int h = 0;
  const SlotKind kind = decode_slot(p, slot_index, &h);
  const int64_t lane_off = static_cast<int64_t>(lane) * V;
  const int64_t d = p.head_dim;
  // The head's segment of the token's row and its norm weights (-1: V, not normed).
  int64_t seg = 0;
  int which_w = -1;
  switch (kind) {
    case kQ:
      seg = h * d;
      which_w = 0;
      break;
    case kK:
      seg = p.k_begin + h * d;
      which_w = 1;
      break;
    case kV:
      seg = p.v_begin + h * d;
      break;
    case kIQ:
      seg = p.iq_begin + h * d;
      which_w = 2;
      break;
    case kIK:
      seg = p.ik_begin;
      which_w = 3;
      break;
  }
  // The position, the cache slot, the row and the norm weights do not depend on one another and
  // are all in flight before any is used (raw loads, branch-free: a head without a slot loads the
  // position again, a V head q's weights, both ignored); the cos/sin entries (which need the
  // position) and a per-token scale (which needs the slot) follow, so an insert waits for two
  // memory round trips ("Issuing loads" in common.cuh). The row is read whatever the position,
  // as it is in bounds of qkv either way.
  const bool kv_slot = (kind == kK || kind == kV) && p.kv_insert;
  const bool ic_slot = kind == kIK && p.index_insert;
  const void* slot_src = kv_slot ? p.slots : ic_slot ? p.index_slots : p.positions;
  const bool slot_i64 = kv_slot ? p.slots_i64 : ic_slot ? p.index_slots_i64 : p.positions_i64;
  const int64_t slot_s0 = kv_slot ? p.slots_s0 : ic_slot ? p.index_slots_s0 : p.positions_s0;
  const RawIndex pos_raw = ld_raw_index(p.positions, p.positions_i64, t * p.positions_s0);
  const RawIndex slot_raw = ld_raw_index(slot_src, slot_i64, t * slot_s0);
  T* src = static_cast<T*>(p.qkv) + t * p.qkv_s0 + seg + lane_off;
  const RawRow<T, V> raw = load_raw<T, V>(src, p.vec_qkv);
  uint32_t w_raw[V];
  load_norm_weights<V>(p, which_w >= 0 ? which_w : 0, w_raw);

  const int64_t pos = index_value(pos_raw, p.positions_i64);
  if (pos < 0 || pos >= p.max_pos) {
    if (pos >= p.max_pos && kind == kQ && h == 0 && lane == 0) {
      raise_error(p.error_flags, kDeviceErrorPosition);
    }
    if (kind == kQ && p.q_out != nullptr) {
      zero_row_dt<V>(p.q_out, p.act, t * p.qo_s0 + h * p.qo_s1 + lane_off, p.vec_q_out);
    }
    if (kind == kIQ && p.iq_out != nullptr) {
      zero_row_dt<V>(p.iq_out, p.iq_dtype, t * p.iqo_s0 + h * p.iqo_s1 + lane_off, p.vec_iq_out);
    }
    return;
  }
  // A slot past its cache is skipped and flagged; a negative one is a padding token's.
  int64_t slot = kv_slot || ic_slot ? index_value(slot_raw, slot_i64) : -1;
  const int64_t slot_limit = kind == kIK ? p.ic_slot_limit : p.kv.slots();
  if (slot >= slot_limit) {
    if (lane == 0) raise_error(p.error_flags, kDeviceErrorSlot);
    slot = -1;
  }
  float divisor = 1.0f;
  if (slot >= 0 && (kind == kK || kind == kV)) divisor = p.kv.scale(kind == kV, h, slot);
  float wv[V];
  if (which_w >= 0) raw_elems_to_floats<V>(p.w_dtype[which_w], w_raw, wv);

  float x[V];
  to_floats<T, V>(raw, x);
  switch (kind) {
    case kQ:
      norm_rope<V>(p, pos, wv, x);
      if (p.q_out != nullptr) {
        store_row_dt<V>(p.q_out, p.act, t * p.qo_s0 + h * p.qo_s1 + lane_off, p.vec_q_out, x, 1.0f);
      } else {
        store_row<T, V>(src, p.vec_qkv, x, 1.0f);
      }
      break;
    case kK:
      norm_rope<V>(p, pos, wv, x);
      store_row<T, V>(src, p.vec_qkv, x, 1.0f);
      if (slot < 0) break;
      store_row_dt<V>(p.kv.k, p.kv.dtype, p.kv.k_slot_offset(h, slot) + lane_off, p.vec_kv, x,
                      divisor);
      break;
    case kV:
      if (slot < 0) break;
      store_row_dt<V>(p.kv.v, p.kv.dtype, p.kv.v_slot_offset(h, slot) + lane_off, p.vec_kv, x,
                      divisor);
      break;
    case kIQ:
      norm_rope<V>(p, pos, wv, x);
      if (p.iq_out != nullptr) {
        store_row_dt<V>(p.iq_out, p.iq_dtype, t * p.iqo_s0 + h * p.iqo_s1 + lane_off, p.vec_iq_out,
                        x, 1.0f);
      } else {
        store_row<T, V>(src, p.vec_qkv, x, 1.0f);
      }
      break;
    case kIK:
      norm_rope<V>(p, pos, wv, x);
      store_row<T, V>(src, p.vec_qkv, x, 1.0f);
      if (slot < 0) break;
      store_row_dt<V>(
          p.index_cache, p.ic_dtype,
          (slot / p.ic_block_size) * p.ic_s0 + (slot % p.ic_block_size) * p.ic_s1 + lane_off,
          p.vec_ic, x, 1.0f);
      break;
  }
}

// ---- General path: any head_dim / index_dim up to kMaxDim, any even rotary_dim <= the dim. ----
// Lane l holds dims d = l + 32 i (i < kMaxPerLane, d < dim); lanes past the end of the row hold
// zeros and never touch memory. Every access is scalar (coalesced across the warp).
constexpr int kMaxDim = 256;
constexpr int kMaxPerLane = kMaxDim / 32;

template <typename T>
__device__ __forceinline__ void load_strided(const T* src, int dim, float (&x)[kMaxPerLane]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    x[i] = d < dim ? to_float(src[d]) : 0.0f;
  }
}

// dst[d] <- y / divisor rounded once, for this lane's dims d < dim.
template <typename T>
__device__ __forceinline__ void store_strided(T* dst, int dim, const float (&y)[kMaxPerLane],
                                              float divisor) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < dim) from_float(divisor == 1.0f ? y[i] : y[i] / divisor, &dst[d]);
  }
}

// store_strided for a runtime storage dtype; `elem` is the element offset of the row's dim 0.
__device__ __forceinline__ void store_strided_dt(void* base, DType dt, int64_t elem, int dim,
                                                 const float (&y)[kMaxPerLane], float divisor) {
  switch (dt) {
    case DType::kBF16:
      store_strided<__nv_bfloat16>(static_cast<__nv_bfloat16*>(base) + elem, dim, y, divisor);
      break;
    case DType::kF16:
      store_strided<__half>(static_cast<__half*>(base) + elem, dim, y, divisor);
      break;
    case DType::kE4M3:
      store_strided<__nv_fp8_storage_t>(static_cast<__nv_fp8_storage_t*>(base) + elem, dim, y,
                                        divisor);
      break;
    default:
      store_strided<float>(static_cast<float*>(base) + elem, dim, y, divisor);
      break;
  }
}

__device__ __forceinline__ void zero_strided_dt(void* base, DType dt, int64_t elem, int dim) {
  float z[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) z[i] = 0.0f;
  store_strided_dt(base, dt, elem, dim, z, 1.0f);
}

// In place: x (this lane's dims of one head of `dim` elements) <- RoPE_pos(GemmaNorm(x; w)).
// `stage` is this warp's kMaxDim-float shared row; the caller's branch is warp-uniform, so every
// lane reaches the __syncwarp. rotary_dim <= dim (check() enforces it for both head kinds).
__device__ __forceinline__ void norm_rope_strided(const FusedParams& p, int which_w, int dim,
                                                  int64_t pos, float (&x)[kMaxPerLane],
                                                  float* stage) {
  const int lane = threadIdx.x % 32;
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));  // pads are 0
#pragma unroll
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(dim) + p.eps);
  const void* w = p.w[which_w];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < dim) {
      const float wi = load_as_float(w, p.w_dtype[which_w], d * p.w_s0[which_w]);
      x[i] = __fmul_rn(__fmul_rn(x[i], inv_rms), __fadd_rn(1.0f, wi));
      stage[d] = x[i];
    }
  }
  __syncwarp();
  // Partner of d: d + half for d < half, d - half for half <= d < rotary_dim.
  const int half = p.rotary_dim / 2;
  const int64_t row = pos * p.cs_s0;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < p.rotary_dim) {
      const bool low = d < half;
      const int f = low ? d : d - half;
      const float other = stage[low ? d + half : f];
      const float c = load_as_float(p.cos_sin, p.cos_sin_dtype, row + f * p.cs_s1);
      const float s = load_as_float(p.cos_sin, p.cos_sin_dtype, row + (half + f) * p.cs_s1);
      x[i] = low ? __fsub_rn(__fmul_rn(x[i], c), __fmul_rn(other, s))
                 : __fadd_rn(__fmul_rn(x[i], c), __fmul_rn(other, s));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    fused_qknorm_rope_general_kernel(FusedParams p) {
  __shared__ float stage_rows[kWarpsPerBlock][kMaxDim];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int64_t t = blockIdx.x;
  const int slot_index = static_cast<int>(blockIdx.y) * kWarpsPerBlock + warp;
  if (slot_index >= p.slots_per_token) return;  // warp-uniform, like every branch below

  int h = 0;
  const SlotKind kind = decode_slot(p, slot_index, &h);
  const int dim = (kind == kIQ || kind == kIK) ? p.index_dim : p.head_dim;
  const int64_t pos = load_index(p.positions, p.positions_i64, t * p.positions_s0);
  if (pos < 0 || pos >= p.max_pos) {
    if (pos >= p.max_pos && kind == kQ && h == 0 && lane == 0) {
      raise_error(p.error_flags, kDeviceErrorPosition);
    }
    if (kind == kQ && p.q_out != nullptr) {
      zero_strided_dt(p.q_out, p.act, t * p.qo_s0 + h * p.qo_s1, dim);
    }
    if (kind == kIQ && p.iq_out != nullptr) {
      zero_strided_dt(p.iq_out, p.iq_dtype, t * p.iqo_s0 + h * p.iqo_s1, dim);
    }
    return;
  }

  T* row = static_cast<T*>(p.qkv) + t * p.qkv_s0;
  float* stage = stage_rows[warp];
  float x[kMaxPerLane];
  switch (kind) {
    case kQ: {
      T* src = row + static_cast<int64_t>(h) * dim;
      load_strided<T>(src, dim, x);
      norm_rope_strided(p, 0, dim, pos, x, stage);
      if (p.q_out != nullptr) {
        store_strided_dt(p.q_out, p.act, t * p.qo_s0 + h * p.qo_s1, dim, x, 1.0f);
      } else {
        store_strided<T>(src, dim, x, 1.0f);
      }
      break;
    }
    case kK: {
      T* src = row + p.k_begin + static_cast<int64_t>(h) * dim;
      load_strided<T>(src, dim, x);
      norm_rope_strided(p, 1, dim, pos, x, stage);
      store_strided<T>(src, dim, x, 1.0f);
      if (!p.kv_insert) break;
      const int64_t slot = load_index(p.slots, p.slots_i64, t * p.slots_s0);
      if (slot < 0) break;
      if (slot >= p.kv.slots()) {
        if (lane == 0) raise_error(p.error_flags, kDeviceErrorSlot);
        break;
      }
      store_strided_dt(p.kv.k, p.kv.dtype, p.kv.k_slot_offset(h, slot), dim, x,
                       p.kv.scale(false, h, slot));
      break;
    }
    case kV: {
      const int64_t slot = load_index(p.slots, p.slots_i64, t * p.slots_s0);
      if (slot < 0) break;
      if (slot >= p.kv.slots()) {
        if (lane == 0) raise_error(p.error_flags, kDeviceErrorSlot);
        break;
      }
      load_strided<T>(row + p.v_begin + static_cast<int64_t>(h) * dim, dim, x);
      store_strided_dt(p.kv.v, p.kv.dtype, p.kv.v_slot_offset(h, slot), dim, x,
                       p.kv.scale(true, h, slot));
      break;
    }
    case kIQ: {
      T* src = row + p.iq_begin + static_cast<int64_t>(h) * dim;
      load_strided<T>(src, dim, x);
      norm_rope_strided(p, 2, dim, pos, x, stage);
      if (p.iq_out != nullptr) {
        store_strided_dt(p.iq_out, p.iq_dtype, t * p.iqo_s0 + h * p.iqo_s1, dim, x, 1.0f);
      } else {
        store_strided<T>(src, dim, x, 1.0f);
      }
      break;
    }
    case kIK: {
      T* src = row + p.ik_begin;
      load_strided<T>(src, dim, x);
      norm_rope_strided(p, 3, dim, pos, x, stage);
      store_strided<T>(src, dim, x, 1.0f);
      if (!p.index_insert) break;
      const int64_t slot = load_index(p.index_slots, p.index_slots_i64, t * p.index_slots_s0);
      if (slot < 0) break;
      if (slot >= p.ic_slot_limit) {
        if (lane == 0) raise_error(p.error_flags, kDeviceErrorSlot);
        break;
      }
      const int64_t off = (slot / p.ic_block_size) * p.ic_s0 + (slot % p.ic_block_size) * p.ic_s1;
      store_strided_dt(p.index_cache, p.ic_dtype, off, dim, x, 1.0f);
      break;
    }
  }
}

// Vector access is allowed when V elements are a 4/8/16-byte word, the base is aligned to it
// and every stride that positions a lane's first element is a multiple of V.
// v = 0 (general path) never vectorises.
bool vec_ok(const void* base, DType dt, int v, std::initializer_list<int64_t> strides) {
  if (v <= 0) return false;
  const int64_t bytes = dtype_size(dt) * v;
  if (bytes != 4 && bytes != 8 && bytes != 16) return false;
  if (!is_aligned(base, static_cast<size_t>(bytes))) return false;
  for (int64_t s : strides) {
    if (s % v != 0) return false;
  }
  return true;
}

// v = head_dim / 32 selects the fast kernel; v = 0 the general one.
// Grid: x = token, y = groups of kWarpsPerBlock head slots (warps past the token's slots exit at
// once). With one flat index over (token, slot) pairs, each warp divided it by slots_per_token:
// two 64-bit divisions among the ~200 instructions before its first load.
template <typename T>
Status launch(const FusedParams& p, int v, Stream stream) {
  if (p.tokens == 0 || p.slots_per_token == 0) return Status::Ok();
  const int64_t slot_groups = (p.slots_per_token + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (p.tokens > 0x7FFFFFFF || slot_groups > 65535) {
    return detail::not_supported(
        "fused_qknorm_rope (CUDA): " + std::to_string(p.tokens) + " tokens x " +
        std::to_string(p.slots_per_token) +
        " head slots per token exceed the grid (at most 2^31 - 1 tokens and 524280 slots)");
  }
  const dim3 blocks(static_cast<unsigned int>(p.tokens), static_cast<unsigned int>(slot_groups));
  const cudaStream_t st = stream_of(stream);
  constexpr int kThreads = kWarpsPerBlock * 32;
  if (v == 0) {
    return launch_kernel("fused_qknorm_rope_general_kernel", fused_qknorm_rope_general_kernel<T>,
                         blocks, dim3(kThreads), 0, st, p);
  }
  // The kernel instantiation of each head_dim / 32.
  void (*const kernels[8])(FusedParams) = {
      fused_qknorm_rope_kernel<T, 1>, fused_qknorm_rope_kernel<T, 2>,
      fused_qknorm_rope_kernel<T, 3>, fused_qknorm_rope_kernel<T, 4>,
      fused_qknorm_rope_kernel<T, 5>, fused_qknorm_rope_kernel<T, 6>,
      fused_qknorm_rope_kernel<T, 7>, fused_qknorm_rope_kernel<T, 8>};
  return launch_kernel("fused_qknorm_rope_kernel", kernels[std::min(v, 8) - 1], blocks,
                       dim3(kThreads), 0, st, p);
}

}  // namespace

Status workspace_size(const FusedQkNormRopeArgs&, size_t* bytes) {
  *bytes = 0;
  return Status::Ok();
}

Status run(const FusedQkNormRopeArgs& args, Workspace, Stream stream) {
  const int64_t head_dim = args.q_norm_weight.shape[0];
  const bool sparse = args.mode == PreAttentionMode::kSparse;
  // Index heads exist only in sparse mode (elsewhere the index segments are not touched).
  const int64_t index_dim = sparse ? args.index_q_norm_weight.shape[0] : head_dim;
  if (head_dim > kMaxDim || index_dim > kMaxDim) {
    return detail::not_supported(
        "fused_qknorm_rope (CUDA): head_dim " + std::to_string(head_dim) + " / index_dim " +
        std::to_string(index_dim) + " exceeds " + std::to_string(kMaxDim) +
        ", the largest head the kernels hold (one warp per head, at most 8 dims per lane)");
  }
  // Fast path: V = head_dim / 32 contiguous dims per lane, the NeoX partner V-aligned (so it
  // sits at the same register index of another lane) and one V for every head kind. Otherwise
  // v = 0: the general kernel.
  int v = head_dim % 32 == 0 ? static_cast<int>(head_dim / 32) : 0;
  if (v > 0 && (index_dim != head_dim || (args.rotary_dim / 2) % v != 0)) v = 0;

  FusedParams p{};
  const TensorView& qkv = args.qkv;
  p.qkv = qkv.data;
  p.act = qkv.dtype;
  p.qkv_s0 = qkv.strides[0];
  p.tokens = qkv.shape[0];
  p.nq = args.num_q_heads;
  p.nkv = args.num_kv_heads;
  p.niq = sparse ? args.num_index_heads : 0;
  p.head_dim = static_cast<int>(head_dim);
  p.index_dim = static_cast<int>(index_dim);
  p.rotary_dim = args.rotary_dim;
  p.eps = args.eps;
  p.sparse = sparse;
  p.kv_insert = args.kv_cache.defined();
  p.index_insert = sparse && args.index_cache.defined();
  p.slots_per_token = p.nq + p.nkv + (p.kv_insert ? p.nkv : 0) + (sparse ? p.niq + 1 : 0);
  p.k_begin = static_cast<int64_t>(p.nq) * head_dim;
  p.v_begin = static_cast<int64_t>(p.nq + p.nkv) * head_dim;
  p.iq_begin = static_cast<int64_t>(p.nq + 2 * p.nkv) * head_dim;
  p.ik_begin = p.iq_begin + static_cast<int64_t>(p.niq) * index_dim;

  p.positions = args.positions.data;
  p.positions_i64 = args.positions.dtype == DType::kI64;
  p.positions_s0 = args.positions.strides[0];
  p.cos_sin = args.cos_sin_cache.data;
  p.cos_sin_dtype = args.cos_sin_cache.dtype;
  p.cs_s0 = args.cos_sin_cache.strides[0];
  p.cs_s1 = args.cos_sin_cache.strides[1];
  p.max_pos = args.cos_sin_cache.shape[0];

  const TensorView* weights[4] = {&args.q_norm_weight, &args.k_norm_weight,
                                  &args.index_q_norm_weight, &args.index_k_norm_weight};
  for (int i = 0; i < 4; ++i) {
    // Index weights are only read in sparse mode; the q weight stands in elsewhere.
    const TensorView& w = (i < 2 || sparse) ? *weights[i] : args.q_norm_weight;
    p.w[i] = w.data;
    p.w_dtype[i] = w.dtype;
    p.w_s0[i] = w.strides[0];
  }

  p.vec_qkv = vec_ok(qkv.data, qkv.dtype, v, {qkv.strides[0]});
  if (p.kv_insert) {
    const KvCacheView& kv = args.kv_cache;
    p.slots = args.slot_mapping.data;
    p.slots_i64 = args.slot_mapping.dtype == DType::kI64;
    p.slots_s0 = args.slot_mapping.strides[0];
    p.kv = kv_cache_device(kv);
    p.vec_kv =
        vec_ok(kv.k.data, kv.k.dtype, v, {kv.k.strides[0], kv.k.strides[1], kv.k.strides[2]}) &&
        vec_ok(kv.v.data, kv.v.dtype, v, {kv.v.strides[0], kv.v.strides[1], kv.v.strides[2]});
  }
  if (p.index_insert) {
    const TensorView& slots =
        args.index_slot_mapping.defined() ? args.index_slot_mapping : args.slot_mapping;
    p.index_slots = slots.data;
    p.index_slots_i64 = slots.dtype == DType::kI64;
    p.index_slots_s0 = slots.strides[0];
    const TensorView& ic = args.index_cache;
    p.index_cache = ic.data;
    p.ic_dtype = ic.dtype;
    p.ic_s0 = ic.strides[0];
    p.ic_s1 = ic.strides[1];
    p.ic_block_size = ic.shape[1];
    p.ic_slot_limit = ic.shape[0] * ic.shape[1];
    p.vec_ic = vec_ok(ic.data, ic.dtype, v, {ic.strides[0], ic.strides[1]});
  }
  if (args.q_out.defined()) {
    const TensorView& q = args.q_out;
    p.q_out = q.data;
    p.qo_s0 = q.strides[0];
    p.qo_s1 = q.ndim == 3 ? q.strides[1] : head_dim;
    p.vec_q_out = vec_ok(q.data, q.dtype, v, {p.qo_s0, p.qo_s1});
  }
  if (sparse && args.index_q_out.defined()) {
    const TensorView& q = args.index_q_out;
    p.iq_out = q.data;
    p.iq_dtype = q.dtype;
    p.iqo_s0 = q.strides[0];
    p.iqo_s1 = q.ndim == 3 ? q.strides[1] : index_dim;
    p.vec_iq_out = vec_ok(q.data, q.dtype, v, {p.iqo_s0, p.iqo_s1});
  }
  p.error_flags = args.error_flags.defined() ? args.error_flags.ptr<int32_t>() : nullptr;
  if (qkv.dtype == DType::kBF16) return launch<__nv_bfloat16>(p, v, stream);
  return launch<__half>(p, v, stream);
}

}  // namespace cuda
}  // namespace msa
