#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "engine/synth_cuda.h"

namespace msa {
namespace engine {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxDirDim = 512;

// One block per token: the block first computes the token's query and key directions (shared
// by every head), then writes the row.
__global__ void synthesize_rows_kernel(uint64_t seed, synth::RowShape shape, int layer,
                                       const int64_t* request_ids, const int64_t* positions,
                                       uint16_t* qkv) {
  __shared__ float qdir[kMaxDirDim];
  __shared__ float kdir[kMaxDirDim];
  const int64_t t = blockIdx.x;
  const auto request = static_cast<uint64_t>(request_ids[t]);
  const int64_t p = positions[t];
  const int dir_dim = shape.head_dim > shape.index_dim ? shape.head_dim : shape.index_dim;
  int64_t focus[synth::kFocusBlocks];
  for (int i = 0; i < synth::kFocusBlocks; ++i) {
    focus[i] = synth::focus_block(seed, request, p, i, shape.block_size);
  }
  for (int d = threadIdx.x; d < dir_dim; d += blockDim.x) {
    qdir[d] = synth::query_direction(seed, request, focus, d);
    kdir[d] = synth::topic(seed, request, p / shape.block_size, d);
  }
  __syncthreads();
  const int width = shape.width();
  const uint64_t key = synth::row_key(seed, request, p, layer);
  uint16_t* row = qkv + t * width;
  for (int c = threadIdx.x; c < width; c += blockDim.x) {
    const int d = synth::row_element_dim(shape, c);
    const float v = synth::row_element(key, shape, c, qdir[d], kdir[d]);
    row[c] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

// One warp per row: lane j hashes strand j (synth::row_strand_digest, coalesced across the
// warp), lane 0 gathers the strands in order and folds the row's digest.
__global__ void fold_digests_kernel(const float* out, int64_t T, int row_len, int layer,
                                    uint64_t* digests) {
  static_assert(synth::kDigestLanes == 32, "one strand per lane");
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (t >= T) return;  // warp-uniform
  const uint64_t mine = synth::row_strand_digest(out + t * row_len, row_len, lane);
  uint64_t strand[synth::kDigestLanes];
  for (int j = 0; j < synth::kDigestLanes; ++j) strand[j] = __shfl_sync(0xFFFFFFFFu, mine, j);
  if (lane == 0) {
    digests[t] = synth::fold_digest(digests[t], synth::combine_strand_digests(strand), layer);
  }
}

Status launch_status(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

Status launch_synthesize_rows(uint64_t seed, const synth::RowShape& shape, int layer,
                              const int64_t* request_ids, const int64_t* positions, int64_t T,
                              uint16_t* qkv) {
  if (T == 0) return Status::Ok();
  if (shape.head_dim > kMaxDirDim || shape.index_dim > kMaxDirDim) {
    return Status(StatusCode::kNotSupported, "synthesis: head_dim or index_dim above 512");
  }
  synthesize_rows_kernel<<<static_cast<unsigned>(T), kThreads>>>(seed, shape, layer, request_ids,
                                                                 positions, qkv);
  return launch_status("synthesize_rows_kernel");
}

Status launch_fold_digests(const float* out, int64_t T, int row_len, int layer, uint64_t* digests) {
  if (T == 0) return Status::Ok();
  constexpr int kRowsPerBlock = kThreads / 32;
  const auto blocks = static_cast<unsigned>((T + kRowsPerBlock - 1) / kRowsPerBlock);
  fold_digests_kernel<<<blocks, kThreads>>>(out, T, row_len, layer, digests);
  return launch_status("fold_digests_kernel");
}

}  // namespace engine
}  // namespace msa
