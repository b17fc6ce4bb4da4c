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
  int pc = IndexScoreConfig<IndexKeys::kBF16>::kMaxPages;
  while (pc > 8 && tiles * ((max_blocks + pc - 1) / pc) < 3 * static_cast<int64_t>(sms)) pc /= 2;
  return pc;
}

// The scorer over the key tiles of `keys` ([pages, 128, 128] with the given byte strides: the
// index cache, or for kE4M3Copy the call's f16 copy).
template <IndexKeys kKeys>
Status launch_scores(const void* keys, uint64_t pages, const uint64_t (&byte_strides)[2],
                     const IndexScoreParams& prm, dim3 grid, cudaStream_t stream) {
  using Cfg = IndexScoreConfig<kKeys>;
  constexpr bool kE4M3Tiles = kKeys == IndexKeys::kE4M3;  // bulk copies of e4m3 tiles
  CUtensorMap map;
  const uint64_t dims[3] = {kIndexDim, kIndexKeys, pages};
  const uint32_t box[3] = {kE4M3Tiles ? 128u : 64u, 128u, 1u};
  const CUtensorMapDataType type = kKeys == IndexKeys::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : kE4M3Tiles              ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  MSA_RETURN_IF_ERROR(
      sm90::encode_sw128_map(&map, kKeys == IndexKeys::kE4M3Copy ? "index key copy" : "index_cache",
                             type, 3, keys, dims, byte_strides, box));
  const auto kernel = index_scores_sm90_kernel<kKeys>;
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

constexpr size_t kKeyCopyPageBytes = kIndexKeys * kIndexDim * 2;
static_assert(kKeyCopyPageBytes / sizeof(float) == detail::kIndexKeyCopyRowHeads,
              "the copy's page takes what 8192 rows x heads of block maxima take");

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

namespace {

// e4m3 queries and keys of the shapes the copy holds (detail::prefill_index_keys_copied says
// which calls of them copy).
bool keys_copy_eligible(const IndexProblem& pb) {
  const bool e4m3 = pb.index_q.dtype == DType::kE4M3 && pb.index_cache.dtype == DType::kE4M3;
  return pb.query_len == 0 && e4m3 && pb.head_dim() == kIndexDim && pb.block_size() == kIndexKeys;
}

bool keys_copied(const IndexProblem& pb) {
  return keys_copy_eligible(pb) &&
         detail::prefill_index_keys_copied(pb.num_requests(), pb.num_heads(), pb.num_rows());
}

}  // namespace

size_t index_keys_copy_bytes(const IndexProblem& pb) {
  if (!keys_copy_eligible(pb)) return 0;
  const int64_t requests =
      detail::prefill_index_key_copy_requests(pb.num_requests(), pb.num_heads(), pb.num_rows());
  return static_cast<size_t>(requests * pb.max_blocks()) * kKeyCopyPageBytes;
}

size_t index_scores_workspace_bytes(const IndexProblem& pb) {
  return detail::align_up(plan_bytes(pb.num_requests())) +
         detail::align_up(index_keys_copy_bytes(pb));
}

Status run_index_scores(const IndexProblem& pb, float* scores, void* workspace, Stream stream) {
  const auto cuda_stream = stream_of(stream);
  const int64_t T = pb.num_rows();
  const int64_t H = pb.num_heads();
  const int32_t tile_tokens = static_cast<int32_t>(kIndexRows / H);
  const RowMap rows =
      make_row_map(pb.seq_lens, pb.cu_seqlens_q, 0, T, pb.max_blocks(), pb.block_size());
  int32_t* flags = pb.error_flags.defined() ? pb.error_flags.ptr<int32_t>() : nullptr;
  auto* offsets = static_cast<int32_t*>(workspace);
  auto* copy = static_cast<uint8_t*>(workspace) + detail::align_up(plan_bytes(pb.num_requests()));
  const bool copied = keys_copied(pb);
  const int64_t copy_pages = pb.num_requests() * pb.max_blocks();
  if (copied && copy_pages > 0x7FFFFFFF) {
    return detail::not_supported("index_topk: more than 2^31 request blocks for the key copy");
  }
  if (copied) {
    MSA_RETURN_IF_ERROR(detail::check_workspace_aligned(
        workspace, "the f16 key copy is read by bulk tensor copies"));
  }
  MSA_RETURN_IF_ERROR(launch_tile_plan(rows, tile_tokens, offsets, flags, cuda_stream));

  const TensorView& c = pb.index_cache;
  if (copied) {
    IndexKeyCopyParams cp;
    cp.rows = rows;
    cp.cache = static_cast<const uint8_t*>(c.data);
    cp.cache_stride_page = c.strides[0];
    cp.cache_stride_key = c.strides[1];
    cp.num_cache_blocks = pb.num_blocks();
    cp.block_table = pb.block_table.ptr<const int32_t>();
    cp.bt_stride_req = pb.block_table.strides[0];
    cp.bt_stride_block = pb.block_table.strides[1];
    cp.copy = copy;
    const int64_t ctas = std::min<int64_t>(copy_pages, 16 * int64_t{device_sm_count()});
    if (ctas > 0) {
      MSA_RETURN_IF_ERROR(launch_kernel("copy_index_keys_f16_kernel", copy_index_keys_f16_kernel,
                                        dim3(static_cast<unsigned>(ctas)), dim3(kKeyCopyThreads), 0,
                                        cuda_stream, cp));
    }
  }

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
  prm.keys_copied = copied;
  const int64_t tiles = max_tiles(T, pb.num_requests(), tile_tokens);
  prm.pages_per_cta = pages_per_cta(tiles, pb.max_blocks(), device_sm_count());
  const int64_t chunks = (pb.max_blocks() + prm.pages_per_cta - 1) / prm.pages_per_cta;
  if (tiles > 0x7FFFFFFF || chunks > 65535) {
    return detail::not_supported("index_topk: prefill batch too large for one CUDA grid");
  }
  const dim3 grid(static_cast<unsigned>(tiles),
                  static_cast<unsigned>(std::max<int64_t>(chunks, 1)));
  if (copied) {
    const uint64_t strides[2] = {kIndexDim * 2, kKeyCopyPageBytes};
    return launch_scores<IndexKeys::kE4M3Copy>(copy, static_cast<uint64_t>(copy_pages), strides,
                                               prm, grid, cuda_stream);
  }
  const int64_t es = dtype_size(c.dtype);
  const uint64_t strides[2] = {static_cast<uint64_t>(c.strides[1] * es),
                               static_cast<uint64_t>(c.strides[0] * es)};
  const auto pages = static_cast<uint64_t>(c.shape[0]);
  if (pb.index_q.dtype == DType::kE4M3) {
    return launch_scores<IndexKeys::kE4M3>(c.data, pages, strides, prm, grid, cuda_stream);
  }
  return launch_scores<IndexKeys::kBF16>(c.data, pages, strides, prm, grid, cuda_stream);
}

}  // namespace prefill
}  // namespace cuda
}  // namespace msa
