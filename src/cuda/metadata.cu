// CUDA backend of the batch metadata builder (spec A8). One CTA does everything, so no
// cross-CTA ordering is needed and the launch shape depends on declared capacities only:
//   1. requests in chunks of blockDim: per-request outputs and block-wide scans of the row
//      counts, prefill seq_lens and KV block counts (carried across chunks); request row
//      offsets and validity go to the workspace;
//   2. every capacity row of the per-token outputs: binary search of the row's request.
// Bad values are flagged and skipped: an invalid request keeps its row span (decode requests
// always own decode_query_len rows) but its tokens get request, position and slot -1; a
// negative page behind a token gives that token slot -1. Pages are checked where a slot reads
// them (the op does not know num_blocks, so only negativity is an error).
#include <algorithm>

#include "core/backends.h"
#include "core/validate.h"
#include "cuda/common.cuh"

namespace msa {
namespace cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

struct Vec1 {
  const int32_t* p = nullptr;
  int64_t s0 = 0;
  int64_t n = 0;  // shape[0]; 0 when not given
};

struct Out1 {
  int32_t* p = nullptr;
  int64_t s0 = 0;
  int64_t n = 0;
  __device__ void store(int64_t i, int64_t v) const {
    if (i < n) p[i * s0] = static_cast<int32_t>(v);
  }
};

struct Out1L {
  int64_t* p = nullptr;
  int64_t s0 = 0;
  int64_t n = 0;
};

struct Table {
  const int32_t* p = nullptr;
  int64_t s0 = 0, s1 = 0;
  int64_t cols = 0;
};

struct MetadataParams {
  int64_t batch;
  int64_t num_decode;
  int decode_query_len;
  int block_size;
  Vec1 query_lens, seq_lens;
  Table block_table, index_block_table;
  Out1 query_start_loc, cu_q, cu_k, context_lens, kv_block_counts, token_request, token_position,
      totals;
  Out1L slot_mapping, index_slot_mapping;
  int64_t token_capacity;
  int64_t* starts;  // workspace [B + 1]
  int32_t* valid;   // workspace [B]
  int32_t* error_flags;
};

// Inclusive block-wide sum of one int64 per thread; `smem` holds kWarps values.
__device__ int64_t block_inclusive_sum(int64_t x, int64_t* smem) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const int64_t y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) smem[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int64_t w = lane < kWarps ? smem[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int64_t y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    if (lane < kWarps) smem[lane] = w;
  }
  __syncthreads();
  const int64_t result = x + (warp > 0 ? smem[warp - 1] : 0);
  __syncthreads();  // smem is reused by the next call
  return result;
}

__device__ int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ int64_t slot_of(const Table& t, int64_t b, int64_t position, int block_size,
                           int32_t* flags) {
  if (t.p == nullptr || position < 0) return -1;
  const int32_t page = t.p[b * t.s0 + (position / block_size) * t.s1];
  if (page < 0) {
    raise_error(flags, kDeviceErrorBlockId);
    return -1;
  }
  return static_cast<int64_t>(page) * block_size + position % block_size;
}

__global__ void __launch_bounds__(kThreads) metadata_kernel(MetadataParams p) {
  __shared__ int64_t s_scan[kWarps];
  __shared__ int64_t s_carry[3];
  if (threadIdx.x < 3) s_carry[threadIdx.x] = 0;
  __syncthreads();
  const int64_t L = p.decode_query_len;
  const int64_t decode_tokens = p.num_decode * L;

  for (int64_t base = 0; base < p.batch; base += kThreads) {
    const int64_t b = base + threadIdx.x;
    int64_t rows = 0, prefill_seq = 0, blocks = 0;
    if (b < p.batch) {
      const int64_t q = p.query_lens.p[b * p.query_lens.s0];
      const int64_t s = p.seq_lens.p[b * p.seq_lens.s0];
      const bool decode = b < p.num_decode;
      bool ok = true;
      if (decode ? !(q == L || (q == 0 && s == 0)) : q < 1) {
        raise_error(p.error_flags, kDeviceErrorQueryLen);
        ok = false;
      }
      if (s < q) {
        raise_error(p.error_flags, kDeviceErrorSeqLen);
        ok = false;
      }
      const int64_t used = ceil_div(std::max<int64_t>(s, 0), p.block_size);
      if ((p.block_table.p != nullptr && used > p.block_table.cols) ||
          (p.index_block_table.p != nullptr && used > p.index_block_table.cols)) {
        raise_error(p.error_flags, kDeviceErrorSeqLen);
        ok = false;
      }
      rows = decode ? L : std::max<int64_t>(q, 0);
      prefill_seq = decode ? 0 : std::max<int64_t>(s, 0);
      blocks = decode ? 0 : used;  // total_kv_blocks counts prefill requests (spec B6)
      p.valid[b] = ok ? 1 : 0;
      p.context_lens.store(b, s - q);
      p.kv_block_counts.store(b, used);
    }
    const int64_t rows_incl = block_inclusive_sum(rows, s_scan);
    const int64_t seq_incl = block_inclusive_sum(prefill_seq, s_scan);
    const int64_t blocks_incl = block_inclusive_sum(blocks, s_scan);
    if (b < p.batch) {
      const int64_t start = s_carry[0] + rows_incl - rows;
      p.starts[b] = start;
      p.query_start_loc.store(b, start);
      if (b >= p.num_decode) {
        p.cu_q.store(b - p.num_decode, start - decode_tokens);
        p.cu_k.store(b - p.num_decode, s_carry[1] + seq_incl - prefill_seq);
      }
    }
    __syncthreads();  // every thread has read the carries
    if (threadIdx.x == kThreads - 1) {
      s_carry[0] += rows_incl;
      s_carry[1] += seq_incl;
      s_carry[2] += blocks_incl;
    }
    __syncthreads();
  }

  const int64_t num_tokens = s_carry[0];
  if (threadIdx.x == 0) {
    p.starts[p.batch] = num_tokens;
    p.query_start_loc.store(p.batch, num_tokens);
    p.cu_q.store(p.batch - p.num_decode, num_tokens - decode_tokens);
    p.cu_k.store(p.batch - p.num_decode, s_carry[1]);
    p.totals.store(0, decode_tokens);
    p.totals.store(1, num_tokens - decode_tokens);
    p.totals.store(2, num_tokens);
    p.totals.store(3, s_carry[2]);
    const int64_t int32_max = 0x7fffffff;
    const bool too_many =
        num_tokens > int32_max || s_carry[1] > int32_max || s_carry[2] > int32_max ||
        (p.token_request.p != nullptr && num_tokens > p.token_request.n) ||
        (p.token_position.p != nullptr && num_tokens > p.token_position.n) ||
        (p.slot_mapping.p != nullptr && num_tokens > p.slot_mapping.n) ||
        (p.index_slot_mapping.p != nullptr && num_tokens > p.index_slot_mapping.n);
    if (too_many) raise_error(p.error_flags, kDeviceErrorCapacity);
  }
  __syncthreads();  // workspace starts/valid written by this CTA are visible to all its threads

  for (int64_t t = threadIdx.x; t < p.token_capacity; t += kThreads) {
    int64_t request = -1, position = -1, slot = -1, index_slot = -1;
    if (t < num_tokens) {
      // Last request whose start is <= t; zero-row requests share a start and are skipped.
      int64_t lo = 0, hi = p.batch;  // invariant: starts[lo] <= t < starts[hi]
      while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (p.starts[mid] <= t) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      if (p.valid[lo]) {
        request = lo;
        const int64_t q = lo < p.num_decode ? L : p.query_lens.p[lo * p.query_lens.s0];
        position = p.seq_lens.p[lo * p.seq_lens.s0] - q + (t - p.starts[lo]);
        if (p.slot_mapping.p != nullptr) {
          slot = slot_of(p.block_table, lo, position, p.block_size, p.error_flags);
        }
        if (p.index_slot_mapping.p != nullptr) {
          index_slot = slot_of(p.index_block_table, lo, position, p.block_size, p.error_flags);
        }
      }
    }
    p.token_request.store(t, request);
    p.token_position.store(t, position);
    if (t < p.slot_mapping.n) p.slot_mapping.p[t * p.slot_mapping.s0] = slot;
    if (t < p.index_slot_mapping.n)
      p.index_slot_mapping.p[t * p.index_slot_mapping.s0] = index_slot;
  }
}

Vec1 vec_of(const TensorView& t) {
  Vec1 v;
  if (t.defined()) {
    v.p = t.ptr<const int32_t>();
    v.s0 = t.strides[0];
    v.n = t.shape[0];
  }
  return v;
}

Out1 out_of(const TensorView& t) {
  Out1 o;
  if (t.defined()) {
    o.p = t.ptr<int32_t>();
    o.s0 = t.strides[0];
    o.n = t.shape[0];
  }
  return o;
}

Out1L out64_of(const TensorView& t) {
  Out1L o;
  if (t.defined()) {
    o.p = t.ptr<int64_t>();
    o.s0 = t.strides[0];
    o.n = t.shape[0];
  }
  return o;
}

Table table_of(const TensorView& t) {
  Table r;
  if (t.defined()) {
    r.p = t.ptr<const int32_t>();
    r.s0 = t.strides[0];
    r.s1 = t.strides[1];
    r.cols = t.shape[1];
  }
  return r;
}

size_t starts_bytes(int64_t batch) {
  return detail::align_up(static_cast<size_t>(batch + 1) * sizeof(int64_t));
}

}  // namespace

Status workspace_size(const BatchMetadataArgs& args, size_t* bytes) {
  const int64_t batch = args.query_lens.shape[0];
  *bytes = starts_bytes(batch) + detail::align_up(static_cast<size_t>(batch) * sizeof(int32_t));
  return Status::Ok();
}

Status run(const BatchMetadataArgs& args, Workspace workspace, Stream stream) {
  size_t needed = 0;
  MSA_RETURN_IF_ERROR(cuda::workspace_size(args, &needed));
  MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, needed));
  MetadataParams p{};
  p.batch = args.query_lens.shape[0];
  p.num_decode = args.num_decode_requests;
  p.decode_query_len = args.decode_query_len;
  p.block_size = args.block_size;
  p.query_lens = vec_of(args.query_lens);
  p.seq_lens = vec_of(args.seq_lens);
  p.block_table = table_of(args.block_table);
  p.index_block_table = table_of(args.index_block_table);
  p.query_start_loc = out_of(args.query_start_loc);
  p.cu_q = out_of(args.prefill_cu_seqlens_q);
  p.cu_k = out_of(args.prefill_cu_seqlens_k);
  p.context_lens = out_of(args.context_lens);
  p.kv_block_counts = out_of(args.kv_block_counts);
  p.token_request = out_of(args.token_request);
  p.token_position = out_of(args.token_position);
  p.totals = out_of(args.totals);
  p.slot_mapping = out64_of(args.slot_mapping);
  p.index_slot_mapping = out64_of(args.index_slot_mapping);
  p.token_capacity =
      std::max({p.token_request.n, p.token_position.n, p.slot_mapping.n, p.index_slot_mapping.n});
  char* ws = static_cast<char*>(workspace.data);
  p.starts = reinterpret_cast<int64_t*>(ws);
  p.valid = reinterpret_cast<int32_t*>(ws + starts_bytes(p.batch));
  p.error_flags = args.error_flags.defined() ? args.error_flags.ptr<int32_t>() : nullptr;
  return launch_kernel("metadata_kernel", metadata_kernel, dim3(1), dim3(kThreads), 0,
                       stream_of(stream), p);
}

}  // namespace cuda
}  // namespace msa
