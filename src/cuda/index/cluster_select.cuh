// The in-cluster top-k of the decode scorer whose chunks of a request form one thread-block
// cluster: selection from the block maxima in the cluster's distributed shared memory.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "cuda/index/params.cuh"
#include "cuda/index/select.cuh"
#include "cuda/row_map.cuh"

namespace msa {
namespace cuda {

// In-cluster top-k of decode request blockIdx.x (its rows are one segment), after its score
// CTAs, chunk c = cluster rank c = blockIdx.y, left their block maxima in block_max ([block in
// chunk][row-head]): CTA c selects row-heads c, c + chunks, ..., its thread b reading block b's
// maximum from the shared memory of the CTA that scored it. Only visible blocks are read, and
// every CTA that owns one scored it (a CTA skips its chunk only when no row of the request sees
// any of its blocks). The keys and the selection are those of the select kernel, so both paths
// write the same bits. The tile bounds are recomputed here rather than kept live across the
// scoring loop, whose registers are at the kernel's limit.
inline __device__ void cluster_select_topk(const IndexScoreParams& prm,
                                           const IndexSelectParams& sel, const uint32_t* block_max,
                                           SelectSmem& sm) {
  static_assert(kScoreThreads == kSelectThreads,
                "write_row_topk_by_rank (rank count, warp tournament) runs on select-kernel CTAs");
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every CTA's block maxima are final
  const int H = prm.num_heads;
  const int64_t tile_start = static_cast<int64_t>(blockIdx.x) * prm.rows_per_tile;
  const int64_t tile_end = min(prm.rows.num_rows, tile_start + prm.rows_per_tile);
  const int nrh = static_cast<int>(tile_end - tile_start) * H;
  const int tid = threadIdx.x;
  const int bpc = prm.blocks_per_cta;
  const RowInfo info = resolve_row(prm.rows, tile_start, nullptr);
  for (int rh = blockIdx.y; rh < nrh; rh += gridDim.y) {
    const int64_t row = tile_start + rh / H;
    const int64_t nvb = visible_blocks(info, info.pos_base + row, prm.rows.block_size);
    float raw = 0.0f;
    if (tid < nvb) {
      raw = unordered_f32(cluster.map_shared_rank(
          block_max, static_cast<unsigned>(tid / bpc))[(tid % bpc) * nrh + rh]);
    }
    write_row_topk_by_rank(sel, row, rh % H, raw, nvb, sm);
  }
  cluster.sync();  // no CTA may exit while another still reads its shared memory
}

}  // namespace cuda
}  // namespace msa
