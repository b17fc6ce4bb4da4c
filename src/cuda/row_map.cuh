// Maps a query row of a decode or prefill batch to its request and absolute position (spec A8),
// validating the batch metadata it reads. Shared by the indexer and sparse-attention kernels so
// that every kernel of a call agrees on which rows are live.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"
#include "msa/tensor.h"

namespace msa {
namespace cuda {

// 64 bytes (the 32-bit fields last), one line of the constant cache that kernels read their
// parameters through ("Kernel parameters" in common.cuh).
struct RowMap {
  const int32_t* seq_lens = nullptr;  // [num_requests]
  int64_t seq_lens_stride = 1;
  const int32_t* cu_seqlens_q = nullptr;  // [num_requests + 1]; null for a decode batch
  int64_t cu_stride = 1;
  int64_t num_rows = 0;    // T
  int64_t max_blocks = 0;  // block-table columns
  int32_t num_requests = 0;
  int32_t query_len = 1;  // decode rows per request
  int32_t block_size = 128;
};
static_assert(sizeof(RowMap) == 64, "RowMap is one 64-byte line");

// The row map of an op call (host side): a decode batch of query_len rows per request when
// cu_seqlens_q is not given, else a prefill batch ([num_requests + 1] offsets); num_rows rows (T)
// over a block table of max_blocks columns and blocks of block_size tokens.
inline RowMap make_row_map(const TensorView& seq_lens, const TensorView& cu_seqlens_q,
                           int query_len, int64_t num_rows, int64_t max_blocks,
                           int64_t block_size) {
  RowMap rows;
  rows.seq_lens = seq_lens.ptr<const int32_t>();
  rows.seq_lens_stride = seq_lens.strides[0];
  if (cu_seqlens_q.defined()) {
    rows.cu_seqlens_q = cu_seqlens_q.ptr<const int32_t>();
    rows.cu_stride = cu_seqlens_q.strides[0];
  }
  rows.num_requests = static_cast<int32_t>(seq_lens.shape[0]);
  rows.query_len = query_len > 0 ? query_len : 1;
  rows.num_rows = num_rows;
  rows.max_blocks = max_blocks;
  rows.block_size = static_cast<int32_t>(block_size);
  return rows;
}

// req < 0: the row attends to nothing (padding, or metadata that failed validation).
// Row r of the request is at position pos_base + r. Rows [row, seg_end) share the request.
struct RowInfo {
  int32_t req;
  int64_t pos_base;
  int64_t seg_end;
};

// The sequence length of `row`'s request in a decode batch (no cu_seqlens_q) as raw bits, loaded
// now so that it is in flight with the caller's other first loads (ld_raw_u32); for
// resolve_row's early-length form. 0 where that form does not read it (a prefill batch, no
// requests); a row past the requests reads the last request's (resolve_row then ignores it).
__device__ __forceinline__ uint32_t ld_decode_seq_len(const RowMap& m, int64_t row) {
  if (m.cu_seqlens_q != nullptr || m.num_requests <= 0) return 0;
  const int64_t req = min(row / m.query_len, static_cast<int64_t>(m.num_requests) - 1);
  return ld_raw_u32(m.seq_lens + req * m.seq_lens_stride);
}

// The decode request of a row, for ld_decode_seq_len_of and resolve_row_of (0 for a batch with
// cu_seqlens_q, which they do not read it for).
__device__ __forceinline__ int64_t decode_request(const RowMap& m, int64_t row) {
  return m.cu_seqlens_q == nullptr ? row / m.query_len : 0;
}

// ld_decode_seq_len for a caller that found the row's request itself (req = row / query_len,
// which the attention kernel divides by a shift when query_len is a power of two).
__device__ __forceinline__ uint32_t ld_decode_seq_len_of(const RowMap& m, int64_t req) {
  if (m.cu_seqlens_q != nullptr || m.num_requests <= 0) return 0;
  req = min(req, static_cast<int64_t>(m.num_requests) - 1);
  return ld_raw_u32(m.seq_lens + req * m.seq_lens_stride);
}

// The decode-batch part of resolve_row for request req < num_requests, given its sequence length
// s (loaded by the caller, or by resolve_row).
__device__ inline RowInfo resolve_decode_row(const RowMap& m, int32_t* flags, int64_t req,
                                             int64_t s) {
  const int64_t bs = m.block_size;
  const int64_t seg_end = min((req + 1) * m.query_len, m.num_rows);
  if (s < 0 || (s + bs - 1) / bs > m.max_blocks) {
    raise_error(flags, kDeviceErrorSeqLen);
    return RowInfo{-1, 0, seg_end};
  }
  // Rows at negative positions (a padded request, seq_len 0, or the leading rows of a request
  // shorter than query_len) are padding by spec A8; the callers test pos >= 0 per row.
  return RowInfo{static_cast<int32_t>(req), s - m.query_len - req * m.query_len, seg_end};
}

// `flags` may be null (callers pass it from one thread only, to keep the atomics few).
__device__ inline RowInfo resolve_row(const RowMap& m, int64_t row, int32_t* flags) {
  const int64_t bs = m.block_size;
  if (m.cu_seqlens_q == nullptr) {
    const int64_t req = row / m.query_len;
    if (req >= m.num_requests) return RowInfo{-1, 0, m.num_rows};
    return resolve_decode_row(m, flags, req, m.seq_lens[req * m.seq_lens_stride]);
  }
  const int64_t last = m.cu_seqlens_q[static_cast<int64_t>(m.num_requests) * m.cu_stride];
  if (row >= last) return RowInfo{-1, 0, m.num_rows};
  // Last request b with cu[b] <= row; the bracket is re-checked below because the values are
  // untrusted (a decreasing cu_seqlens_q makes the search meaningless, not unsafe).
  int32_t lo = 0, hi = m.num_requests - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (m.cu_seqlens_q[mid * m.cu_stride] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t a = m.cu_seqlens_q[lo * m.cu_stride];
  const int64_t b = m.cu_seqlens_q[(lo + 1) * m.cu_stride];
  if (a > row || b <= row || b > m.num_rows) {
    raise_error(flags, kDeviceErrorQueryLen);
    return RowInfo{-1, 0, row + 1};
  }
  const int64_t s = m.seq_lens[lo * m.seq_lens_stride];
  if (s < 0 || (s + bs - 1) / bs > m.max_blocks) {
    raise_error(flags, kDeviceErrorSeqLen);
    return RowInfo{-1, 0, b};
  }
  if (b - a > s) {
    raise_error(flags, kDeviceErrorQueryLen);
    return RowInfo{-1, 0, b};
  }
  return RowInfo{lo, s - (b - a) - a, b};
}

// resolve_row with the sequence length a decode batch's row reads given early, as
// ld_decode_seq_len returned it.
__device__ inline RowInfo resolve_row(const RowMap& m, int64_t row, int32_t* flags,
                                      uint32_t early_seq_len) {
  if (m.cu_seqlens_q != nullptr) return resolve_row(m, row, flags);
  const int64_t req = row / m.query_len;
  if (req >= m.num_requests) return RowInfo{-1, 0, m.num_rows};
  return resolve_decode_row(m, flags, req, static_cast<int32_t>(early_seq_len));
}

// The same with the row's decode request found by the caller (ld_decode_seq_len_of). The index
// kernels keep the forms that divide here: in their instances at the 128-register bound, a
// different division moved registers into stack frames.
__device__ inline RowInfo resolve_row_of(const RowMap& m, int64_t row, int32_t* flags,
                                         uint32_t early_seq_len, int64_t req) {
  if (m.cu_seqlens_q != nullptr) return resolve_row(m, row, flags);
  if (req >= m.num_requests) return RowInfo{-1, 0, m.num_rows};
  return resolve_decode_row(m, flags, req, static_cast<int32_t>(early_seq_len));
}

// Whole-array check of cu_seqlens_q (starts at 0, non-decreasing, ends within T), run by one
// thread per launch: a bad pair that brackets no row would otherwise go unreported, while the
// CPU backend rejects it.
__device__ inline void check_cu_seqlens(const RowMap& m, int32_t* flags) {
  if (m.cu_seqlens_q == nullptr || flags == nullptr) return;
  int64_t prev = m.cu_seqlens_q[0];
  bool bad = prev != 0;
  for (int32_t b = 1; b <= m.num_requests; ++b) {
    const int64_t v = m.cu_seqlens_q[b * m.cu_stride];
    bad = bad || v < prev;
    prev = v;
  }
  if (bad || prev > m.num_rows) raise_error(flags, kDeviceErrorQueryLen);
}

// Monotone map of a float onto uint32 (larger float -> larger integer), for exact max via
// integer atomics and for sort keys.
__device__ __forceinline__ uint32_t ordered_f32(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float unordered_f32(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o);
}

}  // namespace cuda
}  // namespace msa
