// CUDA backend of the page-16 sparse block table (spec A10, B3.4): one warp per output row
// (query row t, KV head h). The warp compacts the row's selected blocks with ballots (full
// blocks first in list order, the partially filled own block last, so a plain paged-attention
// kernel's end-of-sequence mask lands on it), then writes every column of the row.
#include <algorithm>

#include "core/backends.h"
#include "core/validate.h"
#include "cuda/common.cuh"

namespace msa {
namespace cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

struct Page16Params {
  const int32_t* topk;  // [Hkv, >= T, K]
  int64_t topk_s0, topk_s1, topk_s2;
  int topk_k;
  const int32_t* block_table;  // [B, max_blocks]
  int64_t bt_s0, bt_s1;
  int64_t max_blocks;
  const int32_t* seq_lens;  // [B]
  int64_t sl_s0;
  int64_t num_requests;
  int32_t* table_out;  // [T * Hkv, cols]
  int64_t out_s0, out_s1;
  int64_t cols;
  int32_t* ctx_out;  // [T * Hkv]
  int64_t ctx_s0;
  int64_t num_rows;  // T * Hkv
  int num_kv_heads;
  int query_len;
  int block_size;
  int pages_per_block;
  int page_stride;
  int32_t* error_flags;
};

__global__ void __launch_bounds__(kWarpsPerBlock * 32) page16_kernel(Page16Params p) {
  // Per warp: the compacted physical pages of the row (at most K entries).
  extern __shared__ int32_t s_pages[];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (row >= p.num_rows) return;
  int32_t* pages = s_pages + warp * p.topk_k;
  const int64_t t = row / p.num_kv_heads;
  const int h = static_cast<int>(row % p.num_kv_heads);
  const int64_t req = t / p.query_len;

  // Position of the row; negative for padded rows and rows past the batch.
  int64_t pos = -1;
  if (req < p.num_requests) {
    const int64_t seq_len = p.seq_lens[req * p.sl_s0];
    if (seq_len < 0 || seq_len > p.max_blocks * p.block_size) {
      if (lane == 0) raise_error(p.error_flags, kDeviceErrorSeqLen);
    } else {
      pos = seq_len - p.query_len + t % p.query_len;
    }
  }

  int n_full = 0;
  int32_t own_page = -1;
  if (pos >= 0) {
    const int64_t own = pos / p.block_size;
    const int32_t* ids = p.topk + h * p.topk_s0 + t * p.topk_s1;
    const unsigned lanes_below = (1u << lane) - 1u;
    for (int base = 0; base < p.topk_k; base += 32) {
      const int k = base + lane;
      const int32_t id = k < p.topk_k ? ids[k * p.topk_s2] : -1;
      bool full = false, is_own = false;
      int32_t page = -1;
      if (id >= 0) {
        if (id > own) {
          raise_error(p.error_flags, kDeviceErrorTopkId);
        } else {
          page = p.block_table[req * p.bt_s0 + id * p.bt_s1];
          if (page < 0) {
            raise_error(p.error_flags, kDeviceErrorBlockId);
          } else {
            full = id < own;
            is_own = id == own;
          }
        }
      }
      const unsigned full_mask = __ballot_sync(0xffffffffu, full);
      if (full) pages[n_full + __popc(full_mask & lanes_below)] = page;
      n_full += __popc(full_mask);
      const unsigned own_mask = __ballot_sync(0xffffffffu, is_own);
      // A duplicated own id counts once: the first listing wins.
      if (own_mask != 0 && own_page < 0)
        own_page = __shfl_sync(0xffffffffu, page, __ffs(own_mask) - 1);
    }
    if (own_page >= 0 && lane == 0) pages[n_full] = own_page;
  }
  __syncwarp();

  const int n_valid = n_full + (own_page >= 0 ? 1 : 0);
  const int64_t usable = std::min<int64_t>(n_valid, p.cols / p.pages_per_block);
  int32_t* out_row = p.table_out + row * p.out_s0;
  for (int64_t c = lane; c < p.cols; c += 32) {
    const int64_t slot = c / p.pages_per_block;
    int32_t v = 0;
    if (slot < usable) {
      const int64_t j = c % p.pages_per_block;
      v = static_cast<int32_t>(
          (pages[slot] * static_cast<int64_t>(p.page_stride) + j) * p.num_kv_heads + h);
    }
    out_row[c * p.out_s1] = v;
  }
  if (lane == 0) {
    int64_t ctx = 0;
    if (pos >= 0) {
      const int64_t own = pos / p.block_size;
      ctx = own_page >= 0
                ? static_cast<int64_t>(n_full) * p.block_size + (pos + 1 - p.block_size * own)
                : std::min<int64_t>(static_cast<int64_t>(n_valid) * p.block_size, pos + 1);
    }
    p.ctx_out[row * p.ctx_s0] = static_cast<int32_t>(ctx);
  }
}

}  // namespace

Status workspace_size(const SparsePage16Args&, size_t* bytes) {
  *bytes = 0;
  return Status::Ok();
}

Status run(const SparsePage16Args& args, Workspace, Stream stream) {
  Page16Params p{};
  p.topk = args.topk.ptr<const int32_t>();
  p.topk_s0 = args.topk.strides[0];
  p.topk_s1 = args.topk.strides[1];
  p.topk_s2 = args.topk.strides[2];
  p.topk_k = static_cast<int>(args.topk.shape[2]);
  p.block_table = args.block_table.ptr<const int32_t>();
  p.bt_s0 = args.block_table.strides[0];
  p.bt_s1 = args.block_table.strides[1];
  p.max_blocks = args.block_table.shape[1];
  p.seq_lens = args.seq_lens.ptr<const int32_t>();
  p.sl_s0 = args.seq_lens.strides[0];
  p.num_requests = args.seq_lens.shape[0];
  p.table_out = args.table_out.ptr<int32_t>();
  p.out_s0 = args.table_out.strides[0];
  p.out_s1 = args.table_out.strides[1];
  p.cols = args.table_out.shape[1];
  p.ctx_out = args.context_lens_out.ptr<int32_t>();
  p.ctx_s0 = args.context_lens_out.strides[0];
  p.num_rows = args.table_out.shape[0];
  p.num_kv_heads = static_cast<int>(args.topk.shape[0]);
  p.query_len = args.query_len;
  p.block_size = args.block_size;
  p.pages_per_block = args.block_size / 16;
  p.page_stride = args.page_stride;
  p.error_flags = args.error_flags.defined() ? args.error_flags.ptr<int32_t>() : nullptr;
  if (p.num_rows == 0) return Status::Ok();
  if (p.topk_k == 0) {
    return detail::not_supported(
        "sparse_page16: topk.shape[2] is 0; at least one top-k column "
        "is needed");
  }
  const size_t smem = static_cast<size_t>(kWarpsPerBlock) * p.topk_k * sizeof(int32_t);
  if (smem > 48 * 1024) {
    return detail::not_supported("sparse_page16: topk.shape[2] = " + std::to_string(p.topk_k) +
                                 " exceeds the CUDA kernel's limit of 3072 columns");
  }
  return launch_kernel("page16_kernel", page16_kernel, dim3(blocks_for(p.num_rows, kWarpsPerBlock)),
                       dim3(kWarpsPerBlock * 32), smem, stream_of(stream), p);
}

}  // namespace cuda
}  // namespace msa
