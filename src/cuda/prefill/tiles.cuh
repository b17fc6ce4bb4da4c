// Query tiles of a prefill batch for the tensor-core kernels. A tile is up to `tile_tokens`
// consecutive query tokens of one request whose positions lie in one aligned window
// [k * tile_tokens, (k + 1) * tile_tokens); tile_tokens divides the block size, so a tile's
// tokens share their own block (the last block any of them sees).
//
// prefill_tile_plan_kernel (one CTA) validates the batch metadata as RowMap's resolve_row does
// and writes, into the caller's workspace, offsets[b] = the first tile of request b
// (offsets[num_requests] = the tile count) and offsets[num_requests + 1] = 1 when cu_seqlens_q
// starts at 0, never decreases and ends within the rows (0 otherwise, and then no request has
// tiles). Requests whose lengths fail validation get no tiles and raise the same flags as
// resolve_row. The kernels launched after it map a CTA to a tile by a binary search over the
// offsets, so grids are sized from capacities: at most ceil(T / tile_tokens) + 2 * num_requests
// tiles exist.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/row_map.cuh"

namespace msa {
namespace cuda {
namespace prefill {

constexpr int kPlanThreads = 512;

// Tiles a batch of `rows` rows and `requests` requests can have.
inline int64_t max_tiles(int64_t rows, int64_t requests, int64_t tile_tokens) {
  return (rows + tile_tokens - 1) / tile_tokens + 2 * requests;
}

// Workspace of the plan: offsets[num_requests + 2] int32.
inline size_t plan_bytes(int64_t requests) {
  return static_cast<size_t>(requests + 2) * sizeof(int32_t);
}

struct RequestSpan {
  int64_t row0;       // first row of the request (cu_seqlens_q[b])
  int64_t start_pos;  // position of that row (prefix length)
  int64_t end_pos;    // seq_len: one past the last row's position
};

__device__ __forceinline__ RequestSpan request_span(const RowMap& m, int64_t b) {
  const int64_t a = m.cu_seqlens_q[b * m.cu_stride];
  const int64_t e = m.cu_seqlens_q[(b + 1) * m.cu_stride];
  const int64_t s = m.seq_lens[b * m.seq_lens_stride];
  return RequestSpan{a, s - (e - a), s};
}

// The per-call 16-bit copies of e4m3 pages (index keys, attention K/V) hold unit u = request *
// max_blocks + block of the block table. The cache page of unit u, or -1 when the block is at or
// past the request's length (never read) or its page id lies outside the cache (the kernel that
// reads the copy flags it).
__device__ __forceinline__ int32_t copy_unit_page(const RowMap& m, const int32_t* block_table,
                                                  int64_t bt_stride_req, int64_t bt_stride_block,
                                                  int64_t num_cache_blocks, int64_t u) {
  const int64_t req = u / m.max_blocks, b = u - req * m.max_blocks;
  if (b * m.block_size >= m.seq_lens[req * m.seq_lens_stride]) return -1;
  const int32_t page = block_table[req * bt_stride_req + b * bt_stride_block];
  return page >= 0 && page < num_cache_blocks ? page : -1;
}

// Launches prefill_tile_plan_kernel (tiles.cu) on `stream`.
Status launch_tile_plan(const RowMap& m, int32_t tile_tokens, int32_t* offsets, int32_t* flags,
                        cudaStream_t stream);

struct Tile {
  int32_t req = -1;
  int64_t row0 = 0;        // row of position start_pos
  int64_t start_pos = 0;   // the request's first query position
  int64_t win_pos = 0;     // first position of the tile's window
  int64_t lo = 0, hi = 0;  // positions of the tile's rows: [lo, hi)
  int64_t seq_len = 0;
};

// Tile `tile` (< offsets[num_requests]) of the plan.
__device__ __forceinline__ Tile find_tile(const RowMap& m, const int32_t* offsets, int32_t tile,
                                          int32_t tile_tokens) {
  int32_t lo = 0, hi = m.num_requests - 1;
  while (lo < hi) {  // the last request whose first tile is <= tile
    const int32_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const RequestSpan sp = request_span(m, lo);
  Tile t;
  t.req = lo;
  t.row0 = sp.row0;
  t.start_pos = sp.start_pos;
  t.seq_len = sp.end_pos;
  t.win_pos = (sp.start_pos / tile_tokens + (tile - offsets[lo])) * tile_tokens;
  t.lo = max(t.win_pos, sp.start_pos);
  t.hi = min(t.win_pos + tile_tokens, sp.end_pos);
  return t;
}

// Whether `row` belongs to a request that has tiles (so a tile kernel writes it).
__device__ __forceinline__ bool row_is_tiled(const RowMap& m, const int32_t* offsets, int64_t row) {
  const int32_t nreq = m.num_requests;
  if (offsets[nreq + 1] == 0 || row >= m.cu_seqlens_q[static_cast<int64_t>(nreq) * m.cu_stride])
    return false;
  int32_t lo = 0, hi = nreq - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (m.cu_seqlens_q[mid * m.cu_stride] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return offsets[lo + 1] > offsets[lo];
}

}  // namespace prefill
}  // namespace cuda
}  // namespace msa
