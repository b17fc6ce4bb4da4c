// Launcher of the tensor-core prefill index scorer (prefill/index_scores.cuh).
#include <cuda.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/validate.h"
#include "cuda/common.cuh"
#include "cuda/prefill/index_scores.cuh"
#include "cuda/prefill/prefill.h"
#include "cuda/prefill/tiles.cuh"
#include "cuda/sm90/tensor_map.h"

namespace msa {
namespace cuda {
namespace prefill {

bool device_is_sm90() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

detail::PrefillChoice prefill_choice() {
  return detail::parse_prefill_choice(std::getenv("MSA_CUDA_PREFILL"));
}

namespace {

using IndexProblem = detail::IndexTopkProblem;

bool rows_aligned(const TensorView& t, int64_t esize) {
  const int64_t per16 = 16 / esize;
  return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.strides[0] % per16 == 0 &&
         t.strides[1] % per16 == 0 && t.strides[2] == 1;
}

// Blocks per CTA: the most (up to 64) that still give at least three CTAs per SM over the
// tiles, so short prompts spread over the GPU and long ones amortise each CTA's set-up.
int pages_per_cta(int64_t tiles, int64_t max_blocks, int sms) {
  int pc = IndexScoreConfig<false>::kMaxPages;
  while (pc > 8 && tiles * ((max_blocks + pc - 1) / pc) < 3 * static_cast<int64_t>(sms)) pc /= 2;
  return pc;
}

template <bool kFp8>
Status launch_scores(const IndexProblem& pb, const IndexScoreParams& prm, dim3 grid,
                     cudaStream_t stream) {
  using Cfg = IndexScoreConfig<kFp8>;
  const TensorView& c = pb.index_cache;
  const int64_t es = kFp8 ? 1 : 2;
  CUtensorMap map;
  const uint64_t dims[3] = {static_cast<uint64_t>(c.shape[2]), static_cast<uint64_t>(c.shape[1]),
                            static_cast<uint64_t>(c.shape[0])};
  const uint64_t strides[2] = {static_cast<uint64_t>(c.strides[1] * es),
                               static_cast<uint64_t>(c.strides[0] * es)};
  const uint32_t box[3] = {kFp8 ? 128u : 64u, 128u, 1u};
  MSA_RETURN_IF_ERROR(sm90::encode_sw128_map(
      &map, "index_cache", kFp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      3, c.data, dims, strides, box));
  const auto kernel = index_scores_sm90_kernel<kFp8>;
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(StatusCode::kCudaError,
                  std::string("index_scores_sm90_kernel: shared memory: ") + cudaGetErrorString(e));
  }
  return launch_kernel("index_scores_sm90_kernel", kernel, grid, dim3(Cfg::kThreads),
                       Cfg::kSmemBytes, stream, map, prm);
}

}  // namespace

bool index_scores_supported(const IndexProblem& pb) {
  if (!detail::prefill_index_takes_tensor_cores(prefill_choice())) return false;
  if (pb.query_len != 0 || pb.head_dim() != kIndexDim || pb.block_size() != kIndexKeys)
    return false;
  const DType qt = pb.index_q.dtype, kt = pb.index_cache.dtype;
  const bool bf16 = qt == DType::kBF16 && kt == DType::kBF16;
  const bool fp8 = qt == DType::kE4M3 && kt == DType::kE4M3;
  if (!bf16 && !fp8) return false;
  const int64_t H = pb.num_heads();
  if (H < 1 || kIndexRows % H != 0) return false;
  if (!pb.batch_invariant &&
      pb.num_rows() < kIndexMinRowsPerRequest * std::max<int64_t>(pb.num_requests(), 1))
    return false;
  const int64_t es = fp8 ? 1 : 2;
  if (!rows_aligned(pb.index_q, es)) return false;
  const TensorView& c = pb.index_cache;
  const int64_t strides[2] = {c.strides[1] * es, c.strides[0] * es};
  if (c.strides[2] != 1 || !sm90::tma_compatible(c.data, strides, 2)) return false;
  if (pb.num_rows() > 0x7FFFFFFF || pb.max_blocks() > 0x7FFFFFFF) return false;
  static PerDeviceCache<bool, 1> sm90_cache;
  return sm90_cache.get(0, [] { return device_is_sm90(); });
}

size_t index_scores_plan_bytes(const IndexProblem& pb) {
  return detail::align_up(plan_bytes(pb.num_requests()));
}

Status run_index_scores(const IndexProblem& pb, float* scores, void* plan, Stream stream) {
  const auto cuda_stream = stream_of(stream);
  const int64_t T = pb.num_rows();
  const int64_t H = pb.num_heads();
  const int32_t tile_tokens = static_cast<int32_t>(kIndexRows / H);
  const RowMap rows =
      make_row_map(pb.seq_lens, pb.cu_seqlens_q, 0, T, pb.max_blocks(), pb.block_size());
  int32_t* flags = pb.error_flags.defined() ? pb.error_flags.ptr<int32_t>() : nullptr;
  auto* offsets = static_cast<int32_t*>(plan);
  MSA_RETURN_IF_ERROR(launch_tile_plan(rows, tile_tokens, offsets, flags, cuda_stream));

  IndexScoreParams prm;
  prm.rows = rows;
  prm.tile_offsets = offsets;
  prm.index_q = pb.index_q.data;
  prm.q_stride_row = pb.index_q.strides[0];
  prm.q_stride_head = pb.index_q.strides[1];
  prm.block_table = pb.block_table.ptr<const int32_t>();
  prm.bt_stride_req = pb.block_table.strides[0];
  prm.bt_stride_block = pb.block_table.strides[1];
  prm.num_cache_blocks = pb.num_blocks();
  prm.scores = scores;
  prm.num_heads = static_cast<int32_t>(H);
  prm.tile_tokens = tile_tokens;
  prm.init_blocks = pb.params.init_blocks;
  prm.local_blocks = pb.params.local_blocks;
  prm.error_flags = flags;
  const int64_t tiles = max_tiles(T, pb.num_requests(), tile_tokens);
  prm.pages_per_cta = pages_per_cta(tiles, pb.max_blocks(), device_sm_count());
  const int64_t chunks = (pb.max_blocks() + prm.pages_per_cta - 1) / prm.pages_per_cta;
  if (tiles > 0x7FFFFFFF || chunks > 65535) {
    return detail::not_supported("index_topk: prefill batch too large for one CUDA grid");
  }
  const dim3 grid(static_cast<unsigned>(tiles),
                  static_cast<unsigned>(std::max<int64_t>(chunks, 1)));
  if (pb.index_q.dtype == DType::kE4M3) return launch_scores<true>(pb, prm, grid, cuda_stream);
  return launch_scores<false>(pb, prm, grid, cuda_stream);
}

}  // namespace prefill
}  // namespace cuda
}  // namespace msa
