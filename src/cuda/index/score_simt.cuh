// index_score_kernel: the SIMT block scorer (fp32 FMAs), for head dims the tensor-core scorer
// does not take.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/index/block_maxima.cuh"
#include "cuda/index/params.cuh"
#include "cuda/row_map.cuh"

namespace msa {
namespace cuda {

// 8 consecutive key elements -> floats. bf16 keys come as one 16-byte load, e4m3 as 8 bytes.
__device__ __forceinline__ void key8_to_float(uint4 raw, float* f) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ void key8_to_float(uint2 raw, float* f) {
  const uint32_t w[2] = {raw.x, raw.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * j)), __NV_E4M3);
      const float2 v = __half22float2(__half2(h));
      f[4 * i + 2 * j] = v.x;
      f[4 * i + 2 * j + 1] = v.y;
    }
  }
}

template <typename CacheT>
struct IndexKeyLoad;
template <>
struct IndexKeyLoad<__nv_bfloat16> {
  using Raw = uint4;
};
template <>
struct IndexKeyLoad<uint8_t> {
  using Raw = uint2;
};

// One CTA scores up to kMaxScoreBlocks consecutive blocks (blockIdx.y) for one tile of rows
// (blockIdx.x). Every index key is loaded once and dotted with all (row, head) query vectors of
// the tile, which sit in shared memory as floats. A warp handles 16-key tiles (4 lane groups x
// KPI keys); each key is split over the 8 lanes of its group in 8-element units, reduced with a
// fixed xor butterfly, so the fp32 result is the same on every run. Block maxima are exact, so
// the shared-memory integer atomicMax over ordered floats is deterministic.
template <typename CacheT, int UPL>
__global__ void __launch_bounds__(kScoreThreads, 2) index_score_kernel(const IndexScoreParams prm) {
  if (prm.early_select) allow_dependent_launch();
  using Raw = typename IndexKeyLoad<CacheT>::Raw;
  constexpr int KPI = UPL <= 2 ? 4 : 2;  // keys per lane group per tile (registers: KPI*UPL*8)
  constexpr int kTileKeys = 4 * KPI;     // divides 16, hence every block size
  __shared__ __align__(16) float q_s[kMaxScoreRowHeads * kMaxIndexDim];
  __shared__ uint32_t block_max[kMaxScoreBlocks * kMaxScoreRowHeads];
  __shared__ int32_t s_page[kMaxScoreBlocks];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane & 7, grp = lane >> 3;
  const int H = prm.num_heads, Di = prm.head_dim, units = Di / 8;
  const int64_t bs = prm.rows.block_size;
  const int64_t T = prm.rows.num_rows;
  const int64_t max_blocks = prm.rows.max_blocks;
  const int64_t tile_start = static_cast<int64_t>(blockIdx.x) * prm.rows_per_tile;
  const int64_t tile_end = min(T, tile_start + prm.rows_per_tile);
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * prm.blocks_per_cta;
  const int tiles_per_block = static_cast<int>(bs / kTileKeys);
  const CacheT* cache = static_cast<const CacheT*>(prm.cache);

  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    check_cu_seqlens(prm.rows, prm.error_flags);
  }
  for (int64_t row0 = tile_start; row0 < tile_end;) {
    const RowInfo info = resolve_row(
        prm.rows, row0, (threadIdx.x == 0 && blockIdx.y == 0) ? prm.error_flags : nullptr);
    const int64_t row1 = min(info.seg_end, tile_end);
    const int64_t max_pos = info.pos_base + row1 - 1;  // the segment's last row sees the most
    if (info.req < 0 || max_pos < b0 * bs) {
      row0 = row1;
      continue;
    }
    const int nrh = static_cast<int>(row1 - row0) * H;
    const int nblk = static_cast<int>(min(b0 + prm.blocks_per_cta, max_pos / bs + 1) - b0);

    __syncthreads();  // the previous segment is done with q_s and block_max
    for (int i = threadIdx.x; i < nrh * Di; i += kScoreThreads) {
      const int rh = i / Di, d = i - rh * Di;
      const int64_t row = row0 + rh / H;
      q_s[rh * Di + d] = load_as_float(
          prm.index_q, prm.q_dtype,
          row * prm.q_stride_row + (rh % H) * prm.q_stride_head + d * prm.q_stride_dim);
    }
    clear_block_maxima(block_max, nblk * nrh);
    for (int i = threadIdx.x; i < nblk; i += kScoreThreads) {
      s_page[i] = prm.block_table[info.req * prm.bt_stride_req + (b0 + i) * prm.bt_stride_block];
    }
    __syncthreads();

    const int ntiles = nblk * tiles_per_block;
    for (int ti = warp; ti < ntiles; ti += kScoreWarps) {
      const int bl = ti / tiles_per_block;
      const int64_t b = b0 + bl;
      const int64_t in_block = static_cast<int64_t>(ti - bl * tiles_per_block) * kTileKeys;
      const int64_t key0 = b * bs + in_block;
      if (key0 > max_pos) continue;  // warp-uniform: no row of the segment sees these keys
      const int32_t page = s_page[bl];
      if (page < 0 || page >= prm.num_cache_blocks) {
        if (lane == 0 && in_block == 0) raise_error(prm.error_flags, kDeviceErrorBlockId);
        continue;  // the block keeps score -inf
      }
      const CacheT* kbase =
          cache + page * prm.cache_stride_page + (in_block + grp * KPI) * prm.cache_stride_key;
      Raw raw[KPI][UPL];
#pragma unroll
      for (int k = 0; k < KPI; ++k) {
#pragma unroll
        for (int i = 0; i < UPL; ++i) {
          const int u = sub + 8 * i;
          if (u < units) {
            raw[k][i] =
                __ldg(reinterpret_cast<const Raw*>(kbase + k * prm.cache_stride_key + u * 8));
          }
        }
      }
      for (int rh = 0; rh < nrh; ++rh) {
        const float* qr = q_s + rh * Di;
        float qv[UPL * 8];
#pragma unroll
        for (int i = 0; i < UPL; ++i) {
          const int u = sub + 8 * i;
          float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
          if (u < units) {
            lo = *reinterpret_cast<const float4*>(qr + u * 8);
            hi = *reinterpret_cast<const float4*>(qr + u * 8 + 4);
          }
          qv[i * 8 + 0] = lo.x;
          qv[i * 8 + 1] = lo.y;
          qv[i * 8 + 2] = lo.z;
          qv[i * 8 + 3] = lo.w;
          qv[i * 8 + 4] = hi.x;
          qv[i * 8 + 5] = hi.y;
          qv[i * 8 + 6] = hi.z;
          qv[i * 8 + 7] = hi.w;
        }
        const int64_t pos = info.pos_base + row0 + rh / H;
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < KPI; ++k) {
          // Keys are converted here rather than once per tile: keeping only the raw words live
          // halves the registers, and the conversion is one integer op per bf16 element.
          float acc = 0.0f;
#pragma unroll
          for (int i = 0; i < UPL; ++i) {
            if (sub + 8 * i < units) {
              float kf[8];
              key8_to_float(raw[k][i], kf);
#pragma unroll
              for (int e = 0; e < 8; ++e) acc = fmaf(qv[i * 8 + e], kf[e], acc);
            }
          }
          acc += __shfl_xor_sync(0xFFFFFFFFu, acc, 1);
          acc += __shfl_xor_sync(0xFFFFFFFFu, acc, 2);
          acc += __shfl_xor_sync(0xFFFFFFFFu, acc, 4);
          if (isnan(acc)) acc = -1e30f;  // spec A12
          if (key0 + grp * KPI + k <= pos) m = fmaxf(m, acc);
        }
        m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 8));
        m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 16));
        if (lane == (rh & 31)) atomicMax(&block_max[bl * nrh + rh], ordered_f32(m));
      }
    }
    __syncthreads();
    allow_dependent_launch();  // the select kernel may start; it waits for the writes below
    write_block_maxima(prm, block_max, info, row0, b0, nblk, nrh, H, bs, T, max_blocks);
    row0 = row1;
  }
}

}  // namespace cuda
}  // namespace msa
