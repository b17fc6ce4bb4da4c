// CUDA backend of dense causal GQA attention over the paged cache (layers 0-2).
//
// One CTA per (query row, KV head) serves all G = Hq / Hkv q heads of the group, so each K/V
// tile is read from the cache once for the whole group. Four warps; warp w owns heads
// w, w + 4, w + 8, w + 12 (G <= 16). Keys are visited in ascending order in tiles of 32, one
// key per lane:
//   1. lanes 0-31 resolve their key's page (block table), cache offsets and fp8 scales;
//   2. the CTA stages the K and V tiles in shared memory as fp32, dequantised exactly like the
//      CPU reference (x = float(stored) * scale; masked keys are stored as zeros);
//   3. each warp computes the 32 scores of its heads (lane j: key j), then an fp32 online
//      softmax in base 2 whose max and sum are warp butterfly reductions;
//   4. each lane accumulates dims lane + 32 e of its heads' outputs.
// Split-KV for small batches: when rows * Hkv CTAs cannot fill the GPU, each (row, KV head)
// is served by `splits` CTAs (blockIdx.z), each over a contiguous range of the row's key
// tiles; they write unnormalised partials (acc, running max, sum) to the workspace and a
// combine kernel merges them in a fixed order (dense_attention_combine_kernel). The split count
// comes from shapes only (rows, KV heads, block-table capacity), so a captured graph replays any
// batch of the same shapes, and every partial is rewritten on every launch (empty splits write
// empty partials).
// Calls with head dim 128 over a 16-bit cache, or an e4m3 one without per-token-head scales, run
// dense_attention_mma_kernel instead: the same CTAs, splits and partials, with the scores and
// P.V on tensor cores.
// Every reduction has a fixed order, so results are bitwise reproducible run to run.
// Bad values are flagged and skipped: a row whose request is inconsistent (cu_seqlens_q,
// seq_lens; more rows than seq_len, except for a padded request with seq_len 0) is written as an
// empty row (zeros, lse -inf); a key whose page is outside
// [0, num_blocks) is left out of the softmax.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "core/backends.h"
#include "core/launch_policy.h"
#include "core/validate.h"
#include "cuda/common.cuh"
#include "cuda/kv_cache.cuh"
#include "cuda/mma.cuh"
#include "cuda/prefill/prefill.h"

namespace msa {
namespace cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 32;
constexpr int kChunk = 8;  // elements per staging load
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct DenseParams {
  const void* q;
  DType q_dtype;
  int64_t q_s0, q_s1;
  KvCacheDevice kv;
  bool vec_kv;  // 8-element chunks of K and V rows may be loaded as one word
  const int32_t* block_table;
  int64_t bt_s0, bt_s1, max_blocks;
  const int32_t* cu;
  int64_t cu_s0;
  const int32_t* seq_lens;
  int64_t sl_s0;
  int64_t num_requests;
  void* out;
  DType out_dtype;
  int64_t o_s0, o_s1;
  float* lse;
  int64_t lse_s0, lse_s1;
  int64_t num_rows;
  int group;
  float scale_log2;  // softmax_scale * log2(e)
  int splits;
  float* part_o;   // [splits, T, Hq, D] unnormalised outputs (splits > 1 only)
  float* part_ml;  // [splits, T, Hq, 2] running max (base 2) and sum
  int64_t num_q_heads;
  int head_dim;
  int32_t* error_flags;
};

// Final output and lse of one (row, q head) from its softmax state: lane writes dims
// lane + 32 e for e < n_used.
template <int N>
__device__ __forceinline__ void store_final(const DenseParams& p, int64_t t, int64_t hq, int lane,
                                            float m, float l, const float (&acc)[N], int n_used) {
  const bool has_keys = l > 0.0f;
  const float inv_l = has_keys ? 1.0f / l : 0.0f;
#pragma unroll
  for (int e = 0; e < N; ++e) {
    if (e < n_used) {
      store_from_float(p.out, p.out_dtype, t * p.o_s0 + hq * p.o_s1 + lane + 32 * e,
                       has_keys ? acc[e] * inv_l : 0.0f);
    }
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[t * p.lse_s0 + hq * p.lse_s1] = has_keys ? m * kLn2 + logf(l) : -INFINITY;
  }
}

// Request and position of row t; request -1 for rows past the batch and for rows of an
// inconsistent request (flagged).
__device__ void row_info(const DenseParams& p, int64_t t, int64_t* request, int64_t* pos) {
  *request = -1;
  *pos = -1;
  const int64_t total = p.cu[p.num_requests * p.cu_s0];
  if (p.num_requests == 0 || t >= total || p.cu[0] > t) return;
  int64_t lo = 0, hi = p.num_requests;  // last b with cu[b] <= t
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (p.cu[mid * p.cu_s0] <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t begin = p.cu[lo * p.cu_s0], end = p.cu[(lo + 1) * p.cu_s0];
  const int64_t s = p.seq_lens[lo * p.sl_s0];
  if (s < 0 || (s + p.kv.block_size - 1) / p.kv.block_size > p.max_blocks) {
    raise_error(p.error_flags, kDeviceErrorSeqLen);
    return;
  }
  // A request with seq_len 0 is a padded decode request: its rows sit at negative positions and
  // attend to nothing (spec A8).
  if (p.cu[0] != 0 || t >= end || end > p.num_rows || (end - begin > s && s > 0)) {
    raise_error(p.error_flags, kDeviceErrorQueryLen);
    return;
  }
  *request = lo;
  *pos = s - (end - begin) + (t - begin);
}

// Loads kChunk contiguous cache elements as fp32 (one 8- or 16-byte word when `vec`).
__device__ __forceinline__ void load_chunk(const void* base, DType dt, int64_t off, bool vec,
                                           float (&x)[kChunk]) {
  if (dt == DType::kE4M3) {
    const uint8_t* src = static_cast<const uint8_t*>(base) + off;
    if (vec) {
      const uint2 w = *reinterpret_cast<const uint2*>(src);
#pragma unroll
      for (int i = 0; i < kChunk; ++i) x[i] = load_as_float(&w, DType::kE4M3, i);
    } else {
#pragma unroll
      for (int i = 0; i < kChunk; ++i) x[i] = load_as_float(src, DType::kE4M3, i);
    }
    return;
  }
  const uint16_t* src = static_cast<const uint16_t*>(base) + off;
  if (vec) {
    const uint4 w = *reinterpret_cast<const uint4*>(src);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) x[i] = load_as_float(&w, dt, i);
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) x[i] = load_as_float(src, dt, i);
  }
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// DV = head_dim / 32 dims per lane; HPW = heads per warp (ceil(G / 4)).
template <int DV, int HPW>
__global__ void __launch_bounds__(kThreads) dense_attention_kernel(DenseParams p) {
  constexpr int D = DV * 32;
  constexpr int kPitch = D + 4;  // floats per staged K/V row: keeps float4 reads conflict-free
  extern __shared__ float4 smem_f4[];
  float* q_s = reinterpret_cast<float*>(smem_f4);  // [kWarps * HPW][D]
  float* k_s = q_s + kWarps * HPW * D;             // [kTileKeys][kPitch]
  float* v_s = k_s + kTileKeys * kPitch;           // [kTileKeys][kPitch]
  __shared__ int64_t s_koff[kTileKeys], s_voff[kTileKeys];
  __shared__ float s_kscale[kTileKeys], s_vscale[kTileKeys];
  __shared__ int s_ok[kTileKeys];

  const int64_t t = blockIdx.x;
  const int g = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t request, pos;
  row_info(p, t, &request, &pos);

  // q of the group; heads beyond G are zero and never used.
  for (int i = threadIdx.x; i < kWarps * HPW * D; i += kThreads) {
    const int h = i / D, d = i % D;
    q_s[i] = (h < p.group && pos >= 0)
                 ? load_as_float(p.q, p.q_dtype,
                                 t * p.q_s0 + (static_cast<int64_t>(g) * p.group + h) * p.q_s1 + d)
                 : 0.0f;
  }

  float m[HPW], l[HPW], acc[HPW][DV];
#pragma unroll
  for (int i = 0; i < HPW; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < DV; ++e) acc[i][e] = 0.0f;
  }

  // This split's tiles of the row's keys [0, pos].
  const int64_t tiles = pos >= 0 ? pos / kTileKeys + 1 : 0;
  const int64_t per_split = (tiles + p.splits - 1) / p.splits;
  const int64_t tile_begin = blockIdx.z * per_split;
  const int64_t tile_end = min(tiles, tile_begin + per_split);
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t tile0 = tile * kTileKeys;
    __syncthreads();  // the previous tile (and q on the first pass) is no longer being read
    if (threadIdx.x < kTileKeys) {
      const int64_t j = tile0 + threadIdx.x;
      int ok = 0;
      if (j <= pos) {
        const int64_t blk = j / p.kv.block_size, off = j % p.kv.block_size;
        const int64_t page = p.block_table[request * p.bt_s0 + blk * p.bt_s1];
        if (page < 0 || page >= p.kv.num_blocks) {
          raise_error(p.error_flags, kDeviceErrorBlockId);
        } else {
          ok = 1;
          s_koff[threadIdx.x] = p.kv.k_offset(page, g, off);
          s_voff[threadIdx.x] = p.kv.v_offset(page, g, off);
          const int64_t slot = page * p.kv.block_size + off;
          s_kscale[threadIdx.x] = p.kv.scale(false, g, slot);
          s_vscale[threadIdx.x] = p.kv.scale(true, g, slot);
        }
      }
      s_ok[threadIdx.x] = ok;
    }
    __syncthreads();
    constexpr int kChunksPerRow = D / kChunk;
    for (int c = threadIdx.x; c < kTileKeys * kChunksPerRow; c += kThreads) {
      const int j = c / kChunksPerRow, e0 = (c % kChunksPerRow) * kChunk;
      float kx[kChunk], vx[kChunk];
      if (s_ok[j]) {
        load_chunk(p.kv.k, p.kv.dtype, s_koff[j] + e0, p.vec_kv, kx);
        load_chunk(p.kv.v, p.kv.dtype, s_voff[j] + e0, p.vec_kv, vx);
        if (p.kv.scale_mode != KvScaleMode::kNone) {
#pragma unroll
          for (int i = 0; i < kChunk; ++i) {
            kx[i] *= s_kscale[j];
            vx[i] *= s_vscale[j];
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) kx[i] = vx[i] = 0.0f;
      }
      float4* kd = reinterpret_cast<float4*>(k_s + j * kPitch + e0);
      float4* vd = reinterpret_cast<float4*>(v_s + j * kPitch + e0);
      kd[0] = make_float4(kx[0], kx[1], kx[2], kx[3]);
      kd[1] = make_float4(kx[4], kx[5], kx[6], kx[7]);
      vd[0] = make_float4(vx[0], vx[1], vx[2], vx[3]);
      vd[1] = make_float4(vx[4], vx[5], vx[6], vx[7]);
    }
    __syncthreads();

    // Scores of key `lane` for this warp's heads (base-2 logits).
    float prob[HPW];
    const bool key_ok = s_ok[lane] != 0;
    const float4* krow = reinterpret_cast<const float4*>(k_s + lane * kPitch);
#pragma unroll
    for (int i = 0; i < HPW; ++i) {
      const int h = warp + kWarps * i;
      prob[i] = 0.0f;
      if (h >= p.group) continue;  // warp-uniform
      const float4* qrow = reinterpret_cast<const float4*>(q_s + h * D);
      float dot = 0.0f;
#pragma unroll 8
      for (int d4 = 0; d4 < D / 4; ++d4) {
        const float4 a = qrow[d4], b = krow[d4];
        dot = fmaf(a.x, b.x, dot);
        dot = fmaf(a.y, b.y, dot);
        dot = fmaf(a.z, b.z, dot);
        dot = fmaf(a.w, b.w, dot);
      }
      const float s = key_ok ? dot * p.scale_log2 : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(s));
      if (m_new == -INFINITY) continue;  // no key so far: nothing to add
      const float alpha = exp2f(m[i] - m_new);
      prob[i] = exp2f(s - m_new);
      l[i] = l[i] * alpha + warp_sum(prob[i]);
      m[i] = m_new;
#pragma unroll
      for (int e = 0; e < DV; ++e) acc[i][e] *= alpha;
    }
    for (int jj = 0; jj < kTileKeys; ++jj) {
      float vv[DV];
#pragma unroll
      for (int e = 0; e < DV; ++e) vv[e] = v_s[jj * kPitch + lane + 32 * e];
#pragma unroll
      for (int i = 0; i < HPW; ++i) {
        const float pj = __shfl_sync(0xffffffffu, prob[i], jj);
#pragma unroll
        for (int e = 0; e < DV; ++e) acc[i][e] = fmaf(pj, vv[e], acc[i][e]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < HPW; ++i) {
    const int h = warp + kWarps * i;
    if (h >= p.group) continue;
    const int64_t hq = static_cast<int64_t>(g) * p.group + h;
    if (p.splits == 1) {
      store_final<DV>(p, t, hq, lane, m[i], l[i], acc[i], DV);
      continue;
    }
    const int64_t part = (blockIdx.z * p.num_rows + t) * p.num_q_heads + hq;
#pragma unroll
    for (int e = 0; e < DV; ++e) p.part_o[part * D + lane + 32 * e] = acc[i][e];
    if (lane == 0) {
      p.part_ml[2 * part] = m[i];
      p.part_ml[2 * part + 1] = l[i];
    }
  }
}

// Merges the split partials of one (row, q head) per CTA. The maximum over the splits comes
// first (exact in any order); then warp w sums the contiguous split range w of kCombineWarps in
// ascending order, with its loads independent of the running sums so that several are in flight
// (at one row and 512 splits a single warp's chain of dependent loads took most of the call), and
// warp 0 adds the warps' sums in ascending warp order: a fixed order, bitwise reproducible.
constexpr int kCombineWarps = 8;
constexpr int kCombineThreads = kCombineWarps * 32;
constexpr int kMaxHeadDim = 256;

__global__ void __launch_bounds__(kCombineThreads) dense_attention_combine_kernel(DenseParams p) {
  __shared__ float s_m[kCombineWarps], s_l[kCombineWarps];
  __shared__ float s_acc[kCombineWarps][kMaxHeadDim];
  const int64_t item = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = item / p.num_q_heads, hq = item % p.num_q_heads;
  const int64_t stride = p.num_rows * p.num_q_heads;  // between splits
  float m = -INFINITY;
  for (int z = threadIdx.x; z < p.splits; z += kCombineThreads) {
    m = fmaxf(m, p.part_ml[2 * (z * stride + item)]);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  if (lane == 0) s_m[warp] = m;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) m = fmaxf(m, s_m[w]);
  const int n_acc = p.head_dim / 32;  // head_dim <= kMaxHeadDim: at most 8 dims per lane
  float l = 0.0f;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (m != -INFINITY) {
    const int per = (p.splits + kCombineWarps - 1) / kCombineWarps;
    const int z_end = min(p.splits, (warp + 1) * per);
#pragma unroll 4
    for (int z = warp * per; z < z_end; ++z) {
      const int64_t part = z * stride + item;
      const float mz = p.part_ml[2 * part], lz = p.part_ml[2 * part + 1];
      float oz[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        oz[e] = e < n_acc ? p.part_o[part * p.head_dim + lane + 32 * e] : 0.0f;
      if (mz == -INFINITY) continue;  // an empty split adds nothing
      const float w = exp2f(mz - m);
      l += w * lz;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] += w * oz[e];
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    if (e < n_acc) s_acc[warp][lane + 32 * e] = acc[e];
  }
  if (lane == 0) s_l[warp] = l;
  __syncthreads();
  if (warp != 0) return;
  l = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
  for (int w = 0; w < kCombineWarps; ++w) {
    l += s_l[w];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (e < n_acc) acc[e] += s_acc[w][lane + 32 * e];
    }
  }
  store_final<8>(p, t, hq, lane, m, l, acc, n_acc);
}

// Tensor-core form of dense_attention_kernel for 16-bit caches at head dim 128 (the same CTAs,
// splits and partials): the G <= 16 heads of a KV head are the 16 rows of m16n8k16 MMAs whose
// operands come from global memory straight into registers. Each warp walks every fourth 64-key
// chunk of the CTA's split with its own online softmax; the four warps' states are merged in
// shared memory at the end. Fragment layout (lane = 4 r + c): the thread holds Q rows r and r + 8
// at dims [32c, 32c + 32) and, for the 8-key n-tiles of S, reads key r of each tile at the same
// dims, so k-step k of Q K^T pairs dims 32c + 4k .. + 3 in both operands (a permutation of the
// head dim, which the dot product does not see). O's n-tile u, column n holds dim 16 n + u, so
// P V reads dims [16 r, 16 r + 16) of the thread's four keys of each 16-key group, and the
// thread's O fragment covers dims [32c, 32c + 32) of rows r and r + 8. Keys past the row's
// position get P = 0 and zero V (slots past a request's length may hold NaN). P is rounded to
// the MMA type (Q's) for P V, as the prefill tensor-core kernel does. kE4M3: an e4m3 cache
// (without per-token-head scales), each thread reading 32 bytes of K and 16 of V and converting
// them exactly to Q's 16-bit type; a per-layer K scale multiplies the logits and V's the output.
constexpr int kMmaDim = 128;
constexpr int kMmaChunk = 64;

// e4m3 elements 2 kHigh and 2 kHigh + 1 of w as a pair of the MMA type, exactly.
template <bool kF16, bool kHigh>
__device__ __forceinline__ uint32_t e4m3_pair(uint32_t w) {
  if constexpr (kF16) {
    return e4m3x2_to_f16x2<kHigh>(w);
  } else {
    return e4m3x2_to_bf16x2(kHigh ? w >> 16 : w);
  }
}

template <bool kF16, bool kE4M3>
__global__ void __launch_bounds__(kThreads) dense_attention_mma_kernel(DenseParams p) {
  __shared__ float s_o[kWarps][16][kMmaDim + 4];
  __shared__ float s_m[kWarps][16], s_l[kWarps][16];
  const int64_t t = blockIdx.x;
  const int g = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 4, c = lane % 4;
  int64_t request, pos;
  row_info(p, t, &request, &pos);

  // Q rows r and r + 8 (heads of the group; zeros past G), dims [32c, 32c + 32).
  uint32_t qa[2][16];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = r + 8 * h;
    const bool live = head < p.group && pos >= 0;
    const uint16_t* src = static_cast<const uint16_t*>(p.q) + t * p.q_s0 +
                          (int64_t{g} * p.group + head) * p.q_s1 + 32 * c;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint4 v =
          live ? __ldg(reinterpret_cast<const uint4*>(src) + w) : make_uint4(0, 0, 0, 0);
      qa[h][4 * w] = v.x;
      qa[h][4 * w + 1] = v.y;
      qa[h][4 * w + 2] = v.z;
      qa[h][4 * w + 3] = v.w;
    }
  }

  float o[16][4];
#pragma unroll
  for (int u = 0; u < 16; ++u) o[u][0] = o[u][1] = o[u][2] = o[u][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float logit_scale = p.scale_log2, out_scale = 1.0f;
  if constexpr (kE4M3) {
    if (p.kv.scale_mode == KvScaleMode::kPerLayer) {
      logit_scale *= p.kv.k_scale[0];
      out_scale = p.kv.v_scale[0];
    }
  }

  const int64_t chunks = pos >= 0 ? pos / kMmaChunk + 1 : 0;
  const int64_t per_split = (chunks + p.splits - 1) / p.splits;
  const int64_t c_begin = blockIdx.z * per_split;
  const int64_t c_end = min(chunks, c_begin + per_split);
  using Elem = std::conditional_t<kE4M3, uint8_t, uint16_t>;
  const Elem* kc = static_cast<const Elem*>(p.kv.k);
  const Elem* vc = static_cast<const Elem*>(p.kv.v);
  for (int64_t ch = c_begin + warp; ch < c_end; ch += kWarps) {
    const int64_t key0 = ch * kMmaChunk;
    const int64_t blk = key0 / p.kv.block_size, off0 = key0 % p.kv.block_size;
    const int32_t page = p.block_table[request * p.bt_s0 + blk * p.bt_s1];
    if (page < 0 || page >= p.kv.num_blocks) {  // the chunk's keys are left out
      if (lane == 0) raise_error(p.error_flags, kDeviceErrorBlockId);
      continue;
    }
    const Elem* kp = kc + p.kv.k_offset(page, g, off0) + 32 * c;
    const Elem* vp = vc + p.kv.v_offset(page, g, off0) + 16 * r;

    // S = Q K^T over the chunk: 4 groups of 16 keys x 2 n-tiles.
    float s[4][2][4];
#pragma unroll
    for (int grp = 0; grp < 4; ++grp) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint4* kr =
            reinterpret_cast<const uint4*>(kp + (16 * grp + 8 * j + r) * p.kv.k_stride[2]);
        uint32_t kw[16];  // dims 32c + 2q, + 1 in word q
        if constexpr (kE4M3) {
#pragma unroll
          for (int w = 0; w < 2; ++w) {
            const uint4 v = __ldg(kr + w);
            const uint32_t e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              kw[8 * w + 2 * i] = e4m3_pair<kF16, false>(e[i]);
              kw[8 * w + 2 * i + 1] = e4m3_pair<kF16, true>(e[i]);
            }
          }
        } else {
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            const uint4 v = __ldg(kr + w);
            kw[4 * w] = v.x;
            kw[4 * w + 1] = v.y;
            kw[4 * w + 2] = v.z;
            kw[4 * w + 3] = v.w;
          }
        }
        float* d = s[grp][j];
        d[0] = d[1] = d[2] = d[3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < 8; ++ks) {
          mma_m16n8k16<kF16>(s[grp][j], qa[0][2 * ks], qa[1][2 * ks], qa[0][2 * ks + 1],
                             qa[1][2 * ks + 1], kw[2 * ks], kw[2 * ks + 1]);
        }
      }
    }
    // Online softmax in base 2 over the chunk's visible keys.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int grp = 0; grp < 4; ++grp) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t key = key0 + 16 * grp + 8 * j + 2 * c + (e & 1);
          const float x = key <= pos ? s[grp][j][e] * logit_scale : -INFINITY;
          s[grp][j][e] = x;
          mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
      }
    }
    float corr[2], neg_m[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m[h], mx[h]);
      corr[h] = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);
      neg_m[h] = m_new == -INFINITY ? 0.0f : -m_new;
      m[h] = m_new;
      l[h] *= corr[h];
    }
#pragma unroll
    for (int grp = 0; grp < 4; ++grp) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pr = exp2f(s[grp][j][e] + neg_m[e >> 1]);
          s[grp][j][e] = pr;
          l[e >> 1] += pr;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      o[u][0] *= corr[0];
      o[u][1] *= corr[0];
      o[u][2] *= corr[1];
      o[u][3] *= corr[1];
    }
    // O += P V, one 16-key k-step per group: keys 2c, 2c + 1, 2c + 8, 2c + 9 of the group.
#pragma unroll
    for (int grp = 0; grp < 4; ++grp) {
      const uint32_t a0 = pack2<kF16>(s[grp][0][0], s[grp][0][1]);
      const uint32_t a1 = pack2<kF16>(s[grp][0][2], s[grp][0][3]);
      const uint32_t a2 = pack2<kF16>(s[grp][1][0], s[grp][1][1]);
      const uint32_t a3 = pack2<kF16>(s[grp][1][2], s[grp][1][3]);
      uint32_t vw[4][8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int kk = 16 * grp + 2 * c + (i & 1) + 8 * (i >> 1);
        const bool visible = key0 + kk <= pos;
        const uint4* vr = reinterpret_cast<const uint4*>(vp + kk * p.kv.v_stride[2]);
        if constexpr (kE4M3) {  // dims 16r .. 16r + 15 in one word
          const uint4 v = visible ? __ldg(vr) : make_uint4(0, 0, 0, 0);
          const uint32_t e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            vw[i][2 * q] = e4m3_pair<kF16, false>(e[q]);
            vw[i][2 * q + 1] = e4m3_pair<kF16, true>(e[q]);
          }
        } else {
          const uint4 lo = visible ? __ldg(vr) : make_uint4(0, 0, 0, 0);
          const uint4 hi = visible ? __ldg(vr + 1) : make_uint4(0, 0, 0, 0);
          vw[i][0] = lo.x;
          vw[i][1] = lo.y;
          vw[i][2] = lo.z;
          vw[i][3] = lo.w;
          vw[i][4] = hi.x;
          vw[i][5] = hi.y;
          vw[i][6] = hi.z;
          vw[i][7] = hi.w;
        }
      }
#pragma unroll
      for (int u = 0; u < 16; ++u) {
        const uint32_t sel = (u & 1) ? 0x7632u : 0x5410u;
        const uint32_t b0 = __byte_perm(vw[0][u / 2], vw[1][u / 2], sel);
        const uint32_t b1 = __byte_perm(vw[2][u / 2], vw[3][u / 2], sel);
        mma_m16n8k16<kF16>(o[u], a0, a1, a2, a3, b0, b1);
      }
    }
  }

  // The four warps' states, merged in a fixed order.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    if (c == 0) {
      s_m[warp][r + 8 * h] = m[h];
      s_l[warp][r + 8 * h] = l[h];
    }
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      s_o[warp][r + 8 * h][32 * c + u] = o[u][2 * h] * out_scale;
      s_o[warp][r + 8 * h][32 * c + 16 + u] = o[u][2 * h + 1] * out_scale;
    }
  }
  __syncthreads();
  const int head = threadIdx.x / 8, d0 = (threadIdx.x % 8) * 16;
  if (head >= p.group) return;
  float mm = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, s_m[w][head]);
  float wt[kWarps], ll = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    wt[w] = mm == -INFINITY || s_m[w][head] == -INFINITY ? 0.0f : exp2f(s_m[w][head] - mm);
    ll += wt[w] * s_l[w][head];
  }
  float acc[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    acc[i] = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) acc[i] += wt[w] * s_o[w][head][d0 + i];
  }
  const int64_t hq = int64_t{g} * p.group + head;
  if (p.splits == 1) {
    const bool has_keys = ll > 0.0f;
    const float inv = has_keys ? 1.0f / ll : 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i)
      store_from_float(p.out, p.out_dtype, t * p.o_s0 + hq * p.o_s1 + d0 + i,
                       has_keys ? acc[i] * inv : 0.0f);
    if (p.lse != nullptr && d0 == 0)
      p.lse[t * p.lse_s0 + hq * p.lse_s1] = has_keys ? mm * kLn2 + logf(ll) : -INFINITY;
    return;
  }
  const int64_t part = (blockIdx.z * p.num_rows + t) * p.num_q_heads + hq;
#pragma unroll
  for (int i = 0; i < 16; ++i) p.part_o[part * kMmaDim + d0 + i] = acc[i];
  if (d0 == 0) {
    p.part_ml[2 * part] = mm;
    p.part_ml[2 * part + 1] = ll;
  }
}

Status launch_combine(const DenseParams& p, Stream stream) {
  return launch_kernel("dense_attention_combine_kernel", dense_attention_combine_kernel,
                       dim3(static_cast<unsigned int>(p.num_rows * p.num_q_heads)),
                       dim3(kCombineThreads), 0, stream_of(stream), p);
}

template <int DV, int HPW>
Status launch(const DenseParams& p, int64_t num_kv_heads, Stream stream) {
  constexpr int D = DV * 32;
  const size_t smem =
      (static_cast<size_t>(kWarps) * HPW * D + 2 * kTileKeys * (D + 4)) * sizeof(float);
  auto kernel = dense_attention_kernel<DV, HPW>;
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) {
      return Status(StatusCode::kCudaError,
                    std::string("dense_attention_kernel: ") + cudaGetErrorString(e));
    }
  }
  const dim3 grid(static_cast<unsigned int>(p.num_rows), static_cast<unsigned int>(num_kv_heads),
                  static_cast<unsigned int>(p.splits));
  MSA_RETURN_IF_ERROR(launch_kernel("dense_attention_kernel", kernel, grid, dim3(kThreads), smem,
                                    stream_of(stream), p));
  if (p.splits == 1) return Status::Ok();
  return launch_combine(p, stream);
}

Status launch_mma(const DenseParams& p, int64_t num_kv_heads, Stream stream) {
  const bool f16 = p.q_dtype == DType::kF16, e4m3 = p.kv.dtype == DType::kE4M3;
  const auto kernel =
      e4m3
          ? (f16 ? dense_attention_mma_kernel<true, true> : dense_attention_mma_kernel<false, true>)
          : (f16 ? dense_attention_mma_kernel<true, false>
                 : dense_attention_mma_kernel<false, false>);
  const dim3 grid(static_cast<unsigned int>(p.num_rows), static_cast<unsigned int>(num_kv_heads),
                  static_cast<unsigned int>(p.splits));
  MSA_RETURN_IF_ERROR(launch_kernel("dense_attention_mma_kernel", kernel, grid, dim3(kThreads), 0,
                                    stream_of(stream), p));
  if (p.splits == 1) return Status::Ok();
  return launch_combine(p, stream);
}

// Whether dense_attention_mma_kernel serves a call: head dim 128, at most 16 q heads per KV head,
// Q and a 16-bit cache of the same type, or an e4m3 cache without per-token-head scales and a
// bf16 or f16 Q; chunks of 64 keys within a page, and Q, K and V rows that load as 16-byte words.
bool mma_fits(const DenseAttentionArgs& args, const DenseParams& p) {
  const DType kt = args.kv_cache.k.dtype, qt = args.q.dtype;
  const int64_t qs0 = args.q.strides[0], qs1 = args.q.strides[1];
  const bool q16 = qt == DType::kBF16 || qt == DType::kF16;
  bool cache_ok = (kt == DType::kBF16 || kt == DType::kF16) && qt == kt && p.vec_kv;
  if (kt == DType::kE4M3 && q16 && p.kv.scale_mode != KvScaleMode::kPerTokenHead) {
    cache_ok = is_aligned(args.kv_cache.k.data, 16) && is_aligned(args.kv_cache.v.data, 16);
    for (int i = 0; i < 3; ++i) {
      cache_ok = cache_ok && p.kv.k_stride[i] % 16 == 0 && p.kv.v_stride[i] % 16 == 0;
    }
  }
  return p.head_dim == kMmaDim && p.group <= 16 && cache_ok && args.q.strides[2] == 1 &&
         p.kv.block_size % kMmaChunk == 0 && is_aligned(args.q.data, 16) && qs0 % 8 == 0 &&
         qs1 % 8 == 0;
}

template <int DV>
Status launch_dv(const DenseParams& p, int64_t num_kv_heads, Stream stream) {
  if (p.group <= 4) return launch<DV, 1>(p, num_kv_heads, stream);
  if (p.group <= 8) return launch<DV, 2>(p, num_kv_heads, stream);
  return launch<DV, 4>(p, num_kv_heads, stream);
}

// Splits per (row, KV head) for a call with `rows` query rows (detail::dense_split_count).
int split_count(const DenseAttentionArgs& args, int64_t rows) {
  const int64_t max_tiles =
      (args.block_table.shape[1] * args.kv_cache.block_size() + kTileKeys - 1) / kTileKeys;
  return detail::dense_split_count(args.batch_invariant, rows, args.kv_cache.num_kv_heads(),
                                   max_tiles);
}

int split_count(const DenseAttentionArgs& args) { return split_count(args, args.q.shape[0]); }

size_t partial_o_bytes(const DenseAttentionArgs& args, int splits, int64_t rows) {
  return detail::align_up(static_cast<size_t>(splits) * static_cast<size_t>(rows) *
                          static_cast<size_t>(args.q.shape[1]) *
                          static_cast<size_t>(args.kv_cache.head_dim()) * sizeof(float));
}

size_t partial_o_bytes(const DenseAttentionArgs& args, int splits) {
  return partial_o_bytes(args, splits, args.q.shape[0]);
}

size_t partial_ml_bytes(const DenseAttentionArgs& args, int splits, int64_t rows) {
  return detail::align_up(static_cast<size_t>(splits) * static_cast<size_t>(rows) *
                          static_cast<size_t>(args.q.shape[1]) * 2 * sizeof(float));
}

}  // namespace

// Fewer rows can mean more splits, so the workspace for a capacity of T rows is the largest need
// of any call with T' <= T rows: sized once at capacity, it serves every smaller batch. Splits
// only happen below detail::kDenseTargetCtas CTAs, which bounds the search.
Status workspace_size(const DenseAttentionArgs& args, size_t* bytes) {
  size_t need = 0;
  const int64_t limit = std::min<int64_t>(args.q.shape[0], detail::kDenseTargetCtas);
  for (int64_t rows = 1; rows <= limit; ++rows) {
    const int splits = split_count(args, rows);
    if (splits > 1) {
      need = std::max(need,
                      partial_o_bytes(args, splits, rows) + partial_ml_bytes(args, splits, rows));
    }
  }
  *bytes = std::max(need, prefill::attention_workspace_bytes(detail::attention_problem(args)));
  return Status::Ok();
}

Status run(const DenseAttentionArgs& args, Workspace workspace, Stream stream) {
  // Prefill-like calls whose shapes suit it run the tensor-core kernel; decode-like ones (few
  // rows per request) and the other shapes the split-KV kernel below.
  const prefill::AttentionProblem tc = detail::attention_problem(args);
  if (prefill::attention_supported(tc)) {
    MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, prefill::attention_workspace_bytes(tc)));
    return prefill::run_attention(tc, workspace, stream);
  }
  size_t needed = 0;
  MSA_RETURN_IF_ERROR(cuda::workspace_size(args, &needed));
  MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, needed));
  const KvCacheView& kv = args.kv_cache;
  const int64_t d = kv.head_dim();
  const int64_t hq = args.q.shape[1], hkv = kv.num_kv_heads();
  const int64_t group = hq / hkv;
  if (d != 64 && d != 128 && d != 256) {
    return detail::not_supported("dense_attention (CUDA): head_dim " + std::to_string(d) +
                                 " is not supported; the kernel is built for 64, 128 and 256");
  }
  if (group > 16) {
    return detail::not_supported("dense_attention (CUDA): " + std::to_string(group) +
                                 " q heads per KV head; the kernel serves at most 16");
  }
  if (hkv > 65535) {
    return detail::not_supported("dense_attention (CUDA): more than 65535 KV heads");
  }
  if (args.q.shape[0] > 0x7fffffff) {
    return detail::not_supported("dense_attention (CUDA): more than 2^31 - 1 query rows");
  }

  DenseParams p{};
  p.q = args.q.data;
  p.q_dtype = args.q.dtype;
  p.q_s0 = args.q.strides[0];
  p.q_s1 = args.q.strides[1];
  p.kv = kv_cache_device(kv);
  const size_t chunk_bytes = static_cast<size_t>(kChunk * dtype_size(kv.k.dtype));
  bool vec = is_aligned(kv.k.data, chunk_bytes) && is_aligned(kv.v.data, chunk_bytes);
  for (int i = 0; i < 3; ++i) {
    vec = vec && p.kv.k_stride[i] % kChunk == 0 && p.kv.v_stride[i] % kChunk == 0;
  }
  p.vec_kv = vec;
  p.block_table = args.block_table.ptr<const int32_t>();
  p.bt_s0 = args.block_table.strides[0];
  p.bt_s1 = args.block_table.strides[1];
  p.max_blocks = args.block_table.shape[1];
  p.cu = args.cu_seqlens_q.ptr<const int32_t>();
  p.cu_s0 = args.cu_seqlens_q.strides[0];
  p.seq_lens = args.seq_lens.ptr<const int32_t>();
  p.sl_s0 = args.seq_lens.strides[0];
  p.num_requests = args.block_table.shape[0];
  p.out = args.out.data;
  p.out_dtype = args.out.dtype;
  p.o_s0 = args.out.strides[0];
  p.o_s1 = args.out.strides[1];
  if (args.lse.defined()) {
    p.lse = args.lse.ptr<float>();
    p.lse_s0 = args.lse.strides[0];
    p.lse_s1 = args.lse.strides[1];
  }
  p.num_rows = args.q.shape[0];
  p.group = static_cast<int>(group);
  const float scale =
      args.softmax_scale != 0.0f ? args.softmax_scale : 1.0f / std::sqrt(static_cast<float>(d));
  p.scale_log2 = scale * kLog2e;
  p.error_flags = args.error_flags.defined() ? args.error_flags.ptr<int32_t>() : nullptr;
  p.num_q_heads = hq;
  p.head_dim = static_cast<int>(d);
  p.splits = split_count(args);
  if (p.splits > 1) {
    p.part_o = static_cast<float*>(workspace.data);
    p.part_ml = reinterpret_cast<float*>(static_cast<char*>(workspace.data) +
                                         partial_o_bytes(args, p.splits));
  }
  if (p.num_rows == 0 || hkv == 0) return Status::Ok();
  if (mma_fits(args, p)) return launch_mma(p, hkv, stream);
  switch (d) {
    case 64:
      return launch_dv<2>(p, hkv, stream);
    case 128:
      return launch_dv<4>(p, hkv, stream);
    default:
      return launch_dv<8>(p, hkv, stream);
  }
}

}  // namespace cuda
}  // namespace msa
