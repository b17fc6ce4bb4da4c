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
// combine kernel merges them in ascending split order. The split count comes from shapes only
// (rows, KV heads, block-table capacity), so a captured graph replays any batch of the same
// shapes, and every partial is rewritten on every launch (empty splits write empty partials).
// Every reduction has a fixed order, so results are bitwise reproducible run to run.
// Bad values are flagged and skipped: a row whose request is inconsistent (cu_seqlens_q,
// seq_lens; more rows than seq_len, except for a padded request with seq_len 0) is written as an
// empty row (zeros, lse -inf); a key whose page is outside
// [0, num_blocks) is left out of the softmax.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/backends.h"
#include "core/launch_policy.h"
#include "core/validate.h"
#include "cuda/common.cuh"
#include "cuda/kv_cache.cuh"
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

// Merges the split partials of one (row, q head) per warp, in ascending split order.
__global__ void __launch_bounds__(kThreads) dense_attention_combine_kernel(DenseParams p) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (item >= p.num_rows * p.num_q_heads) return;
  const int64_t t = item / p.num_q_heads, hq = item % p.num_q_heads;
  const int64_t stride = p.num_rows * p.num_q_heads;  // between splits
  float m = -INFINITY;
  for (int z = 0; z < p.splits; ++z) m = fmaxf(m, p.part_ml[2 * (z * stride + item)]);
  float l = 0.0f;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // head_dim <= 256: at most 8 dims per lane
  const int n_acc = p.head_dim / 32;
  if (m != -INFINITY) {
    for (int z = 0; z < p.splits; ++z) {
      const int64_t part = z * stride + item;
      const float mz = p.part_ml[2 * part];
      if (mz == -INFINITY) continue;  // an empty split adds nothing
      const float w = exp2f(mz - m);
      l += w * p.part_ml[2 * part + 1];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (e < n_acc) acc[e] += w * p.part_o[part * p.head_dim + lane + 32 * e];
      }
    }
  }
  store_final<8>(p, t, hq, lane, m, l, acc, n_acc);
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
  return launch_kernel("dense_attention_combine_kernel", dense_attention_combine_kernel,
                       dim3(blocks_for(p.num_rows * p.num_q_heads, kWarps)), dim3(kThreads), 0,
                       stream_of(stream), p);
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
