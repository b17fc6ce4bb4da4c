// Indexer: block scores and top-k block selection (spec A2-A4, A12), and the page-16 sparse
// block table (spec A10).
#pragma once

#include "msa/tensor.h"

namespace msa {

// Selection rule shared by the decode and prefill forms. For a query row at absolute position
// p of a request with seq_len tokens (p = seq_len - query_len_of_request + row_in_request):
//   s(p, j)   = <index_q[row, h], index_k(j)>, fp32 accumulation, no scale; NaN -> -1e30
//   S_h(p, b) = max over keys j of block b with j <= p (and j < seq_len)
//   visible blocks b in [0, p / block_size]; blocks b < init_blocks rank above local blocks
//   b >= nvb - local_blocks, which rank above every real score; the min(topk, nvb) highest are
//   kept, equal scores going to the lower block id.
//   topk_out[h, row, :] = the kept ids in ascending order, then -1 up to topk_out.shape[2].
// Rows with p < 0 (padded requests) get all -1.
struct IndexTopkParams {
  int topk = 16;  // <= topk_out.shape[2]
  int init_blocks = 0;
  int local_blocks = 1;
};

// batch_invariant: when true, a request's top-k rows are the same whatever other requests share
// the call. Decode calls always are (every scorer sums a (row, key) score in the same order);
// prefill calls on CUDA then choose the tensor-core scorer from per-row shapes only. The CPU
// backend is always batch invariant.

// Decode rows: num_requests requests with exactly query_len rows each, request-major.
struct IndexTopkDecodeArgs {
  IndexTopkParams params;
  int query_len = 1;       // 1..8 (1 + speculative tokens)
  TensorView index_q;      // [T, H_idx, Di] bf16 or e4m3, T = num_requests * query_len
  TensorView index_cache;  // [num_blocks, block_size, Di] bf16 or e4m3, last stride 1
  TensorView block_table;  // [num_requests, max_blocks] i32: index-cache pages
  TensorView seq_lens;     // [num_requests] i32: tokens in the cache, 0 = padded request
  TensorView topk_out;     // [H_idx, >= T, K] i32; rows [0, T) written
  TensorView error_flags;  // optional [1] i32
  bool batch_invariant = false;
};

// Prefill rows (chunked prefill with a prefix): request b owns rows
// [cu_seqlens_q[b], cu_seqlens_q[b+1]); rows from cu_seqlens_q[B] to T-1 get all -1.
struct IndexTopkPrefillArgs {
  IndexTopkParams params;
  TensorView index_q;       // [T, H_idx, Di]
  TensorView index_cache;   // [num_blocks, block_size, Di]
  TensorView block_table;   // [num_requests, max_blocks] i32
  TensorView cu_seqlens_q;  // [num_requests + 1] i32, starts at 0, non-decreasing, last <= T
  TensorView seq_lens;      // [num_requests] i32: prefix + query tokens of each request
  TensorView topk_out;      // [H_idx, >= T, K] i32 (a view starting at the first prefill row)
  TensorView error_flags;
  bool batch_invariant = false;
};

Status check(const IndexTopkDecodeArgs& args);
Status workspace_size(const IndexTopkDecodeArgs& args, size_t* bytes);
Status run(const IndexTopkDecodeArgs& args, Workspace workspace, Stream stream);

Status check(const IndexTopkPrefillArgs& args);
Status workspace_size(const IndexTopkPrefillArgs& args, size_t* bytes);
Status run(const IndexTopkPrefillArgs& args, Workspace workspace, Stream stream);

// Page-16 sparse block table for decode rows (spec A10, B3.4). For query row t and KV head h
// (output row t * Hkv + h), the valid ids of topk[h, t, :] (ascending) expand, in order, to
// pages_per_block = block_size / 16 page-16 ids each: (P * page_stride + j) * Hkv + h with
// P = block_table[request, id]; unused entries are 0. context_lens_out is
// n_full * block_size + (p + 1 - block_size * own_block) when the own block p / block_size is
// selected, else min(n_valid * block_size, p + 1); 0 for padded rows.
struct SparsePage16Args {
  int query_len = 1;
  int page_stride = 8;          // 8 (separate K/V planes) or 16 (packed sides)
  int block_size = 128;         // multiple of 16
  TensorView topk;              // [Hkv, >= T, K] i32
  TensorView block_table;       // [num_requests, max_blocks] i32 main-cache pages
  TensorView seq_lens;          // [num_requests] i32
  TensorView table_out;         // [T * Hkv, K * block_size / 16] i32
  TensorView context_lens_out;  // [T * Hkv] i32
  TensorView error_flags;
};

Status check(const SparsePage16Args& args);
Status workspace_size(const SparsePage16Args& args, size_t* bytes);
Status run(const SparsePage16Args& args, Workspace workspace, Stream stream);

}  // namespace msa
