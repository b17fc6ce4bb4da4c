// Launcher of the tensor-core prefill attention (prefill/attention_kernel.cuh): the tile plan,
// the rows no tile covers, then one CTA per (tile, KV head).
#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/validate.h"
#include "cuda/common.cuh"
#include "cuda/kv_cache.cuh"
#include "cuda/prefill/attention_kernel.cuh"
#include "cuda/prefill/prefill.h"
#include "cuda/prefill/tiles.cuh"
#include "cuda/sm90/tensor_map.h"

namespace msa {
namespace cuda {
namespace prefill {
namespace {

bool q_rows_aligned(const TensorView& q) {
  return reinterpret_cast<uintptr_t>(q.data) % 16 == 0 && q.strides[0] % 8 == 0 &&
         q.strides[1] % 8 == 0 && q.strides[2] == 1;
}

bool out_aligned(const TensorView& t, int64_t pair_bytes) {
  return reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(pair_bytes) == 0 &&
         t.strides[0] % 2 == 0 && t.strides[1] % 2 == 0 && t.strides[2] == 1;
}

// Byte strides of a cache side's slot, head and page dimensions (the TMA map's order). A
// dimension of extent 1 is never stepped, so its stride is replaced by a valid one (views may
// carry any stride there).
void side_byte_strides(const TensorView& side, int64_t (&out)[3]) {
  const int64_t es = dtype_size(side.dtype);
  out[0] = side.strides[2] * es;
  out[1] = side.shape[1] == 1 ? out[0] * side.shape[2] : side.strides[1] * es;
  out[2] = side.shape[0] == 1 ? out[1] * side.shape[1] : side.strides[0] * es;
}

int32_t tile_tokens(const AttentionProblem& pb) {
  return static_cast<int32_t>(kAttnRows / (pb.q.shape[1] / pb.kv.num_kv_heads()));
}

Status encode_side(CUtensorMap* map, const char* what, const TensorView& side) {
  const uint64_t dims[4] = {
      static_cast<uint64_t>(side.shape[3]), static_cast<uint64_t>(side.shape[2]),
      static_cast<uint64_t>(side.shape[1]), static_cast<uint64_t>(side.shape[0])};
  int64_t bs[3];
  side_byte_strides(side, bs);
  const uint64_t strides[3] = {static_cast<uint64_t>(bs[0]), static_cast<uint64_t>(bs[1]),
                               static_cast<uint64_t>(bs[2])};
  const uint32_t box[4] = {64, static_cast<uint32_t>(kAttnKeys), 1, 1};
  return sm90::encode_sw128_map(map, what,
                                side.dtype == DType::kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                          : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                4, side.data, dims, strides, box);
}

template <sm90::Mma16 kMma, bool kE4M3, bool kSparse, bool kTokenScales = false>
Status launch(const CUtensorMap& k_map, const CUtensorMap& v_map, const AttnParams& prm, dim3 grid,
              cudaStream_t stream) {
  const auto kernel = prefill_attention_sm90_kernel<kMma, kE4M3, kSparse, kTokenScales>;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(attn_smem_bytes(kSparse)));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(StatusCode::kCudaError, std::string("prefill_attention_sm90_kernel: shared "
                                                      "memory: ") +
                                              cudaGetErrorString(e));
  }
  return launch_kernel("prefill_attention_sm90_kernel", kernel, grid, dim3(kAttnThreads),
                       attn_smem_bytes(kSparse), stream, k_map, v_map, prm);
}

template <bool kSparse>
Status launch_for_dtype(const AttentionProblem& pb, const CUtensorMap& k_map,
                        const CUtensorMap& v_map, const AttnParams& prm, dim3 grid,
                        cudaStream_t stream) {
  switch (pb.kv.k.dtype) {
    case DType::kE4M3:
      if (pb.kv.scale_mode == KvScaleMode::kPerTokenHead)
        return launch<sm90::Mma16::kBF16, true, kSparse, true>(k_map, v_map, prm, grid, stream);
      return launch<sm90::Mma16::kBF16, true, kSparse>(k_map, v_map, prm, grid, stream);
    case DType::kF16:
      return launch<sm90::Mma16::kF16, false, kSparse>(k_map, v_map, prm, grid, stream);
    default:
      return launch<sm90::Mma16::kBF16, false, kSparse>(k_map, v_map, prm, grid, stream);
  }
}

constexpr size_t kKvCopyPageHeadBytes = size_t{kAttnKeys} * kAttnDim * 2;  // one side, one head

// The per-call bf16 copy of an e4m3 cache's pages (detail::prefill_kv_copied says when).
bool kv_copied(const AttentionProblem& pb) {
  return detail::prefill_kv_copied(pb.sparse(), pb.batch_invariant, pb.kv.k.dtype,
                                   pb.seq_lens.shape[0], pb.block_table.shape[1], pb.q.shape[0]);
}

size_t kv_copy_side_bytes(const AttentionProblem& pb) {
  const int64_t pages =
      detail::prefill_kv_copy_pages(pb.batch_invariant, pb.kv.k.dtype, pb.seq_lens.shape[0],
                                    pb.block_table.shape[1], pb.q.shape[0]);
  return detail::align_up(static_cast<size_t>(pages * pb.kv.num_kv_heads()) * kKvCopyPageHeadBytes);
}

Status launch_kv_copy(const AttentionProblem& pb, const RowMap& rows, const KvCacheDevice& kvd,
                      uint8_t* k_copy, uint8_t* v_copy, cudaStream_t stream) {
  KvCopyParams cp{};
  cp.rows = rows;
  cp.k8 = static_cast<const uint8_t*>(kvd.k);
  cp.v8 = static_cast<const uint8_t*>(kvd.v);
  for (int i = 0; i < 3; ++i) {
    cp.k_stride[i] = kvd.k_stride[i];
    cp.v_stride[i] = kvd.v_stride[i];
  }
  cp.num_cache_blocks = kvd.num_blocks;
  cp.block_table = pb.block_table.ptr<const int32_t>();
  cp.bt_stride_req = pb.block_table.strides[0];
  cp.bt_stride_block = pb.block_table.strides[1];
  const bool token_scales = pb.kv.scale_mode == KvScaleMode::kPerTokenHead;
  if (token_scales) {
    cp.k_token_scale = kvd.k_scale;
    cp.v_token_scale = kvd.v_scale;
    for (int i = 0; i < 2; ++i) {
      cp.k_token_stride[i] = kvd.k_scale_stride[i];
      cp.v_token_stride[i] = kvd.v_scale_stride[i];
    }
  }
  cp.num_kv_heads = static_cast<int32_t>(pb.kv.num_kv_heads());
  cp.k_copy = k_copy;
  cp.v_copy = v_copy;
  const int64_t units = static_cast<int64_t>(rows.num_requests) * rows.max_blocks;
  const auto ctas =
      static_cast<unsigned>(std::min<int64_t>(units, 16 * int64_t{device_sm_count()}));
  if (ctas == 0) return Status::Ok();
  return token_scales ? launch_kernel("copy_kv_bf16_kernel", copy_kv_bf16_kernel<true>, dim3(ctas),
                                      dim3(kKvCopyThreads), 0, stream, cp)
                      : launch_kernel("copy_kv_bf16_kernel", copy_kv_bf16_kernel<false>, dim3(ctas),
                                      dim3(kKvCopyThreads), 0, stream, cp);
}

}  // namespace

bool attention_supported(const AttentionProblem& pb) {
  const KvCacheView& kv = pb.kv;
  if (!detail::prefill_attention_takes_tensor_cores(prefill_choice(), pb.sparse(), kv.k.dtype,
                                                    kv_copied(pb)))
    return false;
  if (pb.q.shape[2] != kAttnDim || kv.head_dim() != kAttnDim || kv.block_size() != kAttnKeys)
    return false;
  const int64_t hkv = kv.num_kv_heads();
  if (hkv < 1 || pb.q.shape[1] % hkv != 0) return false;
  const int64_t group = pb.q.shape[1] / hkv;
  if (group != 8 && group != 16) return false;
  const int64_t requests = std::max<int64_t>(pb.seq_lens.shape[0], 1);
  if (!pb.batch_invariant && pb.q.shape[0] < kAttnMinRowsPerRequest * requests) return false;
  const DType kt = kv.k.dtype, qt = pb.q.dtype;
  const bool dtypes = (qt == DType::kBF16 && (kt == DType::kBF16 || kt == DType::kE4M3)) ||
                      (qt == DType::kF16 && kt == DType::kF16);
  if (!dtypes) return false;
  if (kt != DType::kE4M3 && kv.scale_mode != KvScaleMode::kNone) return false;
  const DType ot = pb.out.dtype;
  if (ot != qt && ot != DType::kF32) return false;
  if (!q_rows_aligned(pb.q) || !out_aligned(pb.out, ot == DType::kF32 ? 8 : 4)) return false;
  if (pb.sparse()) {
    if (pb.topk.shape[2] * tile_tokens(pb) > kMaxUnion) return false;
    if (pb.block_table.shape[1] > 32 * kMaxBitmapWords) return false;
  }
  for (const TensorView* side : {&kv.k, &kv.v}) {
    if (side->strides[3] != 1) return false;
    int64_t bs[3];
    side_byte_strides(*side, bs);
    if (kt == DType::kE4M3) {
      if (reinterpret_cast<uintptr_t>(side->data) % 16 != 0 || bs[0] % 16 != 0 || bs[1] % 16 != 0 ||
          bs[2] % 16 != 0)
        return false;
    } else if (!sm90::tma_compatible(side->data, bs, 3)) {
      return false;
    }
  }
  const float scale = pb.softmax_scale;
  if (!std::isfinite(scale)) return false;
  if (pb.q.shape[0] > 0x7FFFFFFF || hkv > 65535) return false;
  static PerDeviceCache<bool, 1> sm90_cache;
  return sm90_cache.get(0, [] { return device_is_sm90(); });
}

size_t attention_workspace_bytes(const AttentionProblem& pb) {
  return detail::align_up(plan_bytes(pb.seq_lens.shape[0])) + 2 * kv_copy_side_bytes(pb);
}

Status run_attention(const AttentionProblem& pb, Workspace workspace, Stream stream) {
  const auto cuda_stream = stream_of(stream);
  const int64_t T = pb.q.shape[0];
  const int64_t hq = pb.q.shape[1], hkv = pb.kv.num_kv_heads();
  const RowMap rows =
      make_row_map(pb.seq_lens, pb.cu_seqlens_q, 0, T, pb.block_table.shape[1], pb.kv.block_size());
  int32_t* flags = pb.error_flags.defined() ? pb.error_flags.ptr<int32_t>() : nullptr;
  auto* offsets = static_cast<int32_t*>(workspace.data);
  const int32_t tq = tile_tokens(pb);
  float* lse = pb.lse.defined() ? pb.lse.ptr<float>() : nullptr;
  const int64_t lse_s0 = pb.lse.defined() ? pb.lse.strides[0] : 0;
  const int64_t lse_s1 = pb.lse.defined() ? pb.lse.strides[1] : 0;
  if (T == 0) return Status::Ok();
  // Checked before anything is launched, so that a call that fails writes nothing.
  const bool copied = kv_copied(pb);
  if (copied && rows.num_requests * rows.max_blocks > 0x7FFFFFFF) {
    return detail::not_supported("prefill attention: more than 2^31 request blocks to copy");
  }
  if (copied) {
    MSA_RETURN_IF_ERROR(detail::check_workspace_aligned(
        workspace.data, "the bf16 K/V copy is read by bulk tensor copies"));
  }
  if (rows.num_requests > 0) {
    MSA_RETURN_IF_ERROR(launch_tile_plan(rows, tq, offsets, flags, cuda_stream));
  } else {
    // No requests: every row is padding. offsets = {0 tiles, batch invalid}.
    if (cudaMemsetAsync(offsets, 0, 2 * sizeof(int32_t), cuda_stream) != cudaSuccess) {
      (void)cudaGetLastError();
      return Status(StatusCode::kCudaError, "prefill attention: cudaMemsetAsync failed");
    }
  }
  const int64_t items = T * hq;
  const unsigned empty_ctas = static_cast<unsigned>(std::min<int64_t>((items + 7) / 8, 1024));
  MSA_RETURN_IF_ERROR(launch_kernel("prefill_empty_rows_kernel", prefill_empty_rows_kernel,
                                    dim3(empty_ctas), dim3(256), 0, cuda_stream, rows, offsets,
                                    static_cast<int32_t>(hq), pb.out.data, pb.out.dtype,
                                    pb.out.strides[0], pb.out.strides[1], lse, lse_s0, lse_s1));
  if (rows.num_requests == 0) return Status::Ok();

  AttnParams prm{};
  prm.rows = rows;
  prm.tile_offsets = offsets;
  prm.q = pb.q.data;
  prm.q_stride_row = pb.q.strides[0];
  prm.q_stride_head = pb.q.strides[1];
  const KvCacheView& kv = pb.kv;
  const KvCacheDevice kvd = kv_cache_device(kv);
  CUtensorMap k_map{}, v_map{};
  prm.kv_copied = copied;
  if (copied) {
    const int64_t pages = rows.num_requests * rows.max_blocks;
    auto* k_copy =
        static_cast<uint8_t*>(workspace.data) + detail::align_up(plan_bytes(pb.seq_lens.shape[0]));
    uint8_t* v_copy = k_copy + kv_copy_side_bytes(pb);
    MSA_RETURN_IF_ERROR(launch_kv_copy(pb, rows, kvd, k_copy, v_copy, cuda_stream));
    const TensorView k_view =
        make_tensor(k_copy, DType::kBF16, {pages, hkv, kAttnKeys, kAttnDim}, kv.k.device);
    const TensorView v_view =
        make_tensor(v_copy, DType::kBF16, {pages, hkv, kAttnKeys, kAttnDim}, kv.k.device);
    MSA_RETURN_IF_ERROR(encode_side(&k_map, "kv_cache.k (bf16 copy)", k_view));
    MSA_RETURN_IF_ERROR(encode_side(&v_map, "kv_cache.v (bf16 copy)", v_view));
  } else if (kv.k.dtype == DType::kE4M3) {
    prm.k8 = static_cast<const uint8_t*>(kvd.k);
    prm.v8 = static_cast<const uint8_t*>(kvd.v);
    for (int i = 0; i < 3; ++i) {
      prm.k_stride[i] = kvd.k_stride[i];
      prm.v_stride[i] = kvd.v_stride[i];
    }
  } else {
    MSA_RETURN_IF_ERROR(encode_side(&k_map, "kv_cache.k", kv.k));
    MSA_RETURN_IF_ERROR(encode_side(&v_map, "kv_cache.v", kv.v));
  }
  prm.num_cache_blocks = kvd.num_blocks;
  prm.block_table = pb.block_table.ptr<const int32_t>();
  prm.bt_stride_req = pb.block_table.strides[0];
  prm.bt_stride_block = pb.block_table.strides[1];
  if (pb.sparse()) {
    prm.topk = pb.topk.ptr<const int32_t>();
    prm.tk_stride_head = pb.topk.strides[0];
    prm.tk_stride_row = pb.topk.strides[1];
    prm.tk_stride_col = pb.topk.strides[2];
    prm.topk_width = static_cast<int32_t>(pb.topk.shape[2]);
  }
  prm.out = pb.out.data;
  prm.out_dtype = pb.out.dtype;
  prm.out_stride_row = pb.out.strides[0];
  prm.out_stride_head = pb.out.strides[1];
  prm.lse = lse;
  prm.lse_stride_row = lse_s0;
  prm.lse_stride_head = lse_s1;
  prm.scale_log2 = pb.scale() * kLog2e;
  if (kv.scale_mode == KvScaleMode::kPerLayer) {
    prm.k_scale = kvd.k_scale;
    prm.v_scale = kvd.v_scale;
  } else if (kv.scale_mode == KvScaleMode::kPerTokenHead && !prm.kv_copied) {
    prm.k_token_scale = kvd.k_scale;
    prm.v_token_scale = kvd.v_scale;
    for (int i = 0; i < 2; ++i) {
      prm.k_token_stride[i] = kvd.k_scale_stride[i];
      prm.v_token_stride[i] = kvd.v_scale_stride[i];
    }
  }
  prm.group = static_cast<int32_t>(hq / hkv);
  prm.tile_tokens = tq;
  prm.error_flags = flags;
  const int64_t tiles = max_tiles(T, rows.num_requests, tq);
  if (tiles > 0x7FFFFFFF) return detail::not_supported("prefill attention: too many query tiles");
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(hkv));
  if (copied) {
    return pb.sparse()
               ? launch<sm90::Mma16::kBF16, false, true>(k_map, v_map, prm, grid, cuda_stream)
               : launch<sm90::Mma16::kBF16, false, false>(k_map, v_map, prm, grid, cuda_stream);
  }
  return pb.sparse() ? launch_for_dtype<true>(pb, k_map, v_map, prm, grid, cuda_stream)
                     : launch_for_dtype<false>(pb, k_map, v_map, prm, grid, cuda_stream);
}

}  // namespace prefill
}  // namespace cuda
}  // namespace msa
