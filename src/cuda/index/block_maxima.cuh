// The block maxima of a score CTA's segment, shared by the SIMT and tensor-core scorers:
// block_max[bl * nrh + rh] is the largest score of block b0 + bl for row-head rh of the segment
// (rows row0 + rh / H, heads rh % H) as an ordered_f32, accumulated with shared-memory atomicMax
// (exact, so the result does not depend on the order of the atomics).
#pragma once

#include <cstdint>

#include "cuda/index/params.cuh"
#include "cuda/row_map.cuh"

namespace msa {
namespace cuda {

// Sets the first n maxima to -inf, before a segment is scored.
template <int kSize>
__device__ __forceinline__ void clear_block_maxima(uint32_t (&block_max)[kSize], const int& n) {
  for (int i = threadIdx.x; i < n; i += kScoreThreads) {
    block_max[i] = ordered_f32(-INFINITY);
  }
}

// Writes the maxima of the blocks each row sees (b <= pos / bs) to the score workspace
// [H, T, max_blocks]; the others stay unwritten, and the select kernel does not read them.
template <int kSize>
__device__ __forceinline__ void write_block_maxima(const IndexScoreParams& prm,
                                                   const uint32_t (&block_max)[kSize],
                                                   const RowInfo& info, const int64_t& row0,
                                                   const int64_t& b0, const int& nblk,
                                                   const int& nrh, const int& H, const int64_t& bs,
                                                   const int64_t& T, const int64_t& max_blocks) {
  for (int i = threadIdx.x; i < nblk * nrh; i += kScoreThreads) {
    const int bl = i / nrh, rh = i - bl * nrh;
    const int64_t row = row0 + rh / H;
    const int64_t pos = info.pos_base + row;
    const int64_t b = b0 + bl;
    if (pos >= 0 && b <= pos / bs) {
      prm.scores[((rh % H) * T + row) * max_blocks + b] = unordered_f32(block_max[i]);
    }
  }
}

}  // namespace cuda
}  // namespace msa
