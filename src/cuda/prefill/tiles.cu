// The tile plan of prefill/tiles.cuh.
#include <cub/block/block_scan.cuh>

#include "cuda/prefill/tiles.cuh"

namespace msa {
namespace cuda {
namespace prefill {
namespace {

__global__ void __launch_bounds__(kPlanThreads)
    prefill_tile_plan_kernel(RowMap m, int32_t tile_tokens, int32_t* offsets, int32_t* flags) {
  using Scan = cub::BlockScan<int32_t, kPlanThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t carry;
  const int32_t nreq = m.num_requests;
  // The batch: cu_seqlens_q starts at 0, never decreases and ends within the rows.
  bool bad = false;
  for (int32_t b = threadIdx.x; b <= nreq; b += kPlanThreads) {
    const int64_t v = m.cu_seqlens_q[b * m.cu_stride];
    if (b == 0) bad = bad || v != 0;
    if (b > 0) bad = bad || v < m.cu_seqlens_q[(b - 1) * m.cu_stride];
    if (b == nreq) bad = bad || v > m.num_rows;
  }
  const bool batch_bad = __syncthreads_or(bad) != 0;
  if (threadIdx.x == 0) {
    carry = 0;
    if (batch_bad) raise_error(flags, kDeviceErrorQueryLen);
  }
  __syncthreads();
  const int64_t bs = m.block_size;
  for (int32_t base = 0; base < nreq; base += kPlanThreads) {
    const int32_t b = base + static_cast<int32_t>(threadIdx.x);
    int32_t count = 0;
    if (b < nreq && !batch_bad) {
      const int64_t a = m.cu_seqlens_q[b * m.cu_stride];
      const int64_t e = m.cu_seqlens_q[(b + 1) * m.cu_stride];
      const int64_t s = m.seq_lens[b * m.seq_lens_stride];
      if (s < 0 || (s + bs - 1) / bs > m.max_blocks) {
        raise_error(flags, kDeviceErrorSeqLen);
      } else if (e - a > s) {
        raise_error(flags, kDeviceErrorQueryLen);
      } else if (e > a) {
        count =
            static_cast<int32_t>((s + tile_tokens - 1) / tile_tokens - (s - (e - a)) / tile_tokens);
      }
    }
    int32_t excl = 0, total = 0;
    Scan(scan).ExclusiveSum(count, excl, total);
    if (b < nreq) offsets[b] = carry + excl;
    __syncthreads();
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    offsets[nreq] = carry;
    offsets[nreq + 1] = batch_bad ? 0 : 1;
  }
}

}  // namespace

Status launch_tile_plan(const RowMap& m, int32_t tile_tokens, int32_t* offsets, int32_t* flags,
                        cudaStream_t stream) {
  return launch_kernel("prefill_tile_plan_kernel", prefill_tile_plan_kernel, dim3(1),
                       dim3(kPlanThreads), 0, stream, m, tile_tokens, offsets, flags);
}

}  // namespace prefill
}  // namespace cuda
}  // namespace msa
