// Attention over the paged KV cache: sparse (MSA, spec A5) for decode and prefill rows, and
// dense causal GQA (layers 0-2).
#pragma once

#include "msa/cache.h"
#include "msa/tensor.h"

namespace msa {

// For query row t at position p of its request, q head h and KV head g = h / (Hq / Hkv):
//   keys(t) = { j : j <= p, j < seq_len, j / block_size in Sel }      (sparse)
//             { j : j <= p, j < seq_len }                              (dense)
//   Sel = the non-negative ids of topk[g, t, :] (request-relative logical block ids), a set:
//         order and repeats do not change the result. The index ops write rows ascending and
//         front-packed (-1 padding last), the form the CUDA kernel ranks fastest.
//   out[t, h]  = sum_j softmax_j(scale * <q[t, h], k_g(j)>) * v_g(j)
//   lse[t, h]  = ln(sum_j exp(scale * <q[t, h], k_g(j)>))
// fp8 caches are dequantised (x = float(stored) * scale per the cache's scale mode) before the
// dot products; how each backend rounds on the way (the CUDA kernels round operands for the
// tensor cores, and apply e4m3 scales to fp32 logits, probabilities and outputs instead of to
// each element) is in docs/numerics.md. Blocks are accumulated in ascending block order. Rows
// with no keys (padded rows, p < 0: a padded request with seq_len 0, or the leading rows of a
// decode request shorter than query_len) give out = 0 and lse = -inf. Cache slots outside
// keys(t) never reach a row's output, whatever their bits (NaN or Inf in a slot not written
// yet included).

// batch_invariant (every attention Args): when true, a request's out and lse are bitwise the same
// whatever other requests share the call (and however many rows the call has): the CUDA backend
// then picks its kernels and its split of each row's keys from per-row shapes only (fixed
// 32-subtile splits for sparse decode; the tensor-core kernel for prefill shapes it takes, else
// unsplit rows). It can be slower for small batches. The CPU backend is always batch invariant.

// Decode rows: num_requests requests with exactly query_len rows each.
struct SparseAttentionDecodeArgs {
  int query_len = 1;           // 1..8
  float softmax_scale = 0.0f;  // 0 = head_dim^-0.5
  TensorView q;                // [T, Hq, D] bf16 / f16 / f32, last stride 1
  KvCacheView kv_cache;
  TensorView block_table;  // [num_requests, max_blocks] i32
  TensorView seq_lens;     // [num_requests] i32 (0 = padded request)
  TensorView topk;         // [Hkv, >= T, K] i32, ids ascending and -1 padded
  TensorView out;          // [T, Hq, D] q's dtype or f32
  TensorView lse;          // optional [T, Hq] f32
  TensorView error_flags;  // optional [1] i32
  bool batch_invariant = false;
};

// Prefill rows: request b owns rows [cu_seqlens_q[b], cu_seqlens_q[b+1]); rows past
// cu_seqlens_q[B] are padding (out = 0, lse = -inf).
struct SparseAttentionPrefillArgs {
  float softmax_scale = 0.0f;
  TensorView q;  // [T, Hq, D]
  KvCacheView kv_cache;
  TensorView block_table;   // [num_requests, max_blocks] i32
  TensorView cu_seqlens_q;  // [num_requests + 1] i32
  TensorView seq_lens;      // [num_requests] i32: prefix + query tokens
  TensorView topk;          // [Hkv, >= T, K] i32 (a view starting at the first prefill row)
  TensorView out;           // [T, Hq, D]
  TensorView lse;           // optional [T, Hq] f32
  TensorView error_flags;
  bool batch_invariant = false;
};

// Dense causal GQA over the paged cache, rows laid out as in the prefill form (a decode batch
// is cu_seqlens_q = [0, L, 2L, ...]). A request with seq_len 0 is a padded decode request
// (spec A8): its rows, however many, give out = 0 and lse = -inf; any other request has at most
// seq_len rows.
struct DenseAttentionArgs {
  float softmax_scale = 0.0f;
  TensorView q;  // [T, Hq, D]
  KvCacheView kv_cache;
  TensorView block_table;   // [num_requests, max_blocks] i32
  TensorView cu_seqlens_q;  // [num_requests + 1] i32
  TensorView seq_lens;      // [num_requests] i32
  TensorView out;           // [T, Hq, D]
  TensorView lse;           // optional [T, Hq] f32
  TensorView error_flags;
  bool batch_invariant = false;
};

Status check(const SparseAttentionDecodeArgs& args);
Status workspace_size(const SparseAttentionDecodeArgs& args, size_t* bytes);
Status run(const SparseAttentionDecodeArgs& args, Workspace workspace, Stream stream);

Status check(const SparseAttentionPrefillArgs& args);
Status workspace_size(const SparseAttentionPrefillArgs& args, size_t* bytes);
Status run(const SparseAttentionPrefillArgs& args, Workspace workspace, Stream stream);

Status check(const DenseAttentionArgs& args);
Status workspace_size(const DenseAttentionArgs& args, size_t* bytes);
Status run(const DenseAttentionArgs& args, Workspace workspace, Stream stream);

}  // namespace msa
