// CUDA backend of sparse attention, decode and prefill forms (spec A5, A7, A8); prefill calls
// whose shapes suit it run the tensor-core kernel of src/cuda/prefill instead.
//
// Work decomposition: one CTA per (query row, KV head, chunk of 16 q heads, split). The q heads of
// a KV head share every K/V load as the M dimension of mma.sync.m16n8k16 (16 fill it; 8 at TP8
// pad with zero rows), so a row's cache bytes are read once per CTA, not once per head. Two
// kernels:
//  * sparse_attention_block_kernel (block_kernel.cuh; 16-bit or e4m3 K/V, head dim 128, 128-key
//    blocks) when a split per selected block fits one resident wave (TP4 decode batch 1-16 at
//    top-16): each CTA copies its block's K and V into shared memory at once and computes it
//    whole;
//  * sparse_attention_kernel (warp_kernel.cuh) otherwise: operands go from global memory straight
//    into MMA fragments, and each of its 4 warps is an independent online softmax over every
//    fourth 16-key subtile, its next subtile's loads in flight while it computes one.
// Both are latency-bound and written for memory-level parallelism: the prologue issues the top-k
// ids, Q and the row metadata loads together, then the dependent block-table loads.
//
// Split-K (plan_attention_launch, core/launch_policy.h): a row has at most topk_width *
// block_size / 16 subtiles. When rows x KV heads x head chunks give fewer than ~2 CTAs per SM
// (small decode batches), that range is cut into equal splits (whole warps' subtiles) with the
// grid kept within one resident wave. Each split normalises its partial output and log2-sum-exp,
// and they are combined in ascending split order either in-cluster (the splits of a row are one
// thread-block cluster, merged through distributed shared memory: one kernel, no workspace) or by
// sparse_attention_merge_kernel from the workspace (merge_kernel.cuh); both with the same
// arithmetic, so the same splits give the same bits. Grids depend only on shapes and the device,
// so CUDA graphs replay correctly when the batch contents change, and the reduction order is
// fixed, so results are bitwise repeatable.
//
// Numerics (documented deviations from the fp32 CPU reference, docs/numerics.md): Q is rounded to
// the MMA type (bf16, or f16 for f16 and e4m3 caches, after a power-of-two prescale for e4m3), and
// the probabilities P are rounded to the MMA type before P.V. e4m3 K/V are multiplied as exact
// f16 and their scales applied to fp32 values: per-layer ones to the logits and outputs,
// per-token-head ones to the logits and probabilities (the same values for power-of-two scales).
// Logits, the online softmax, the accumulators and the merges are fp32. The one-block kernel
// rounds P after the block's maximum, the 4-warp kernel after each 16-key subtile's running
// maximum, so the two give different bits within these bounds.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/attention_problem.h"
#include "core/backends.h"
#include "core/launch_policy.h"
#include "core/validate.h"
#include "cuda/attention/block_kernel.cuh"
#include "cuda/attention/merge_kernel.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/warp_kernel.cuh"
#include "cuda/common.cuh"
#include "cuda/kv_cache.cuh"
#include "cuda/prefill/prefill.h"
#include "msa/attention.h"

namespace msa {
namespace cuda {
namespace {

using AttnProblem = detail::AttentionProblem;

// 16-head chunks (the MMA's M dimension) per KV head, and the most 16-key subtiles a row can
// select.
int64_t head_chunks(const AttnProblem& pb) { return (pb.group() + kAttnHeads - 1) / kAttnHeads; }
int64_t max_subtiles(const AttnProblem& pb) { return pb.topk_width() * (pb.block_size() / 16); }

using AttnPlan = detail::AttnLaunchPlan;
static_assert(detail::kAttnWarpsPerCta == kAttnWarps, "policy and kernel agree on warps");

template <typename CacheT, int D, bool kTwoBuffers, bool kTokenScales = false>
constexpr auto kKernel = sparse_attention_kernel<CacheT, D, kTwoBuffers, kTokenScales>;

// The kernel instance of a call's cache dtype, head dim, merge path and (e4m3) scale mode: the
// two-buffer main loop for 16-bit K/V outside clusters, else the copying one (see the kernel's
// main loop); e4m3 K/V with per-token-head scales take the instance that carries them.
template <typename CacheT>
auto kernel_for(int64_t head_dim, bool cluster, KvScaleMode scale_mode) {
  if constexpr (sizeof(CacheT) == 2) {
    if (!cluster) return head_dim == 64 ? kKernel<CacheT, 64, true> : kKernel<CacheT, 128, true>;
  } else {
    if (scale_mode == KvScaleMode::kPerTokenHead) {
      return head_dim == 64 ? kKernel<CacheT, 64, false, true> : kKernel<CacheT, 128, false, true>;
    }
  }
  return head_dim == 64 ? kKernel<CacheT, 64, false> : kKernel<CacheT, 128, false>;
}

// The clusters of `kernel` the current device can run (detail::AttnClusterLimits): 16 CTAs where
// a 16-CTA cluster can be resident (Hopper's non-portable maximum), else the portable 8.
template <typename Kernel>
detail::AttnClusterLimits query_cluster_limits(Kernel kernel) {
  for (int size : {16, 8}) {
    const int resident =
        resident_clusters(kernel, dim3(kAttnThreads), dim3(1, 1, static_cast<unsigned>(size)));
    if (resident > 0) return detail::AttnClusterLimits{size, resident};
  }
  return {};
}

// query_cluster_limits of a call's kernel, cached per device and kernel variant (cache dtype
// bf16 / f16 / e4m3 with per-token scales / other e4m3 x head dim 64 / 128).
detail::AttnClusterLimits cluster_limits(const AttnProblem& pb) {
  static PerDeviceCache<detail::AttnClusterLimits, 8> cache;
  const KvScaleMode mode = pb.kv.scale_mode;
  const int variant = pb.kv.k.dtype == DType::kBF16        ? 0
                      : pb.kv.k.dtype == DType::kF16       ? 1
                      : mode == KvScaleMode::kPerTokenHead ? 2
                                                           : 3;
  return cache.get(2 * variant + (pb.head_dim() == 64 ? 0 : 1), [&] {
    switch (pb.kv.k.dtype) {
      case DType::kBF16:
        return query_cluster_limits(kernel_for<__nv_bfloat16>(pb.head_dim(), true, mode));
      case DType::kF16:
        return query_cluster_limits(kernel_for<__half>(pb.head_dim(), true, mode));
      default:
        return query_cluster_limits(kernel_for<uint8_t>(pb.head_dim(), true, mode));
    }
  });
}

// What the launch policy needs of the device, queried once per op call.
struct DeviceLimits {
  int sms = 0;
  detail::AttnClusterLimits clusters;
};

DeviceLimits device_limits(const AttnProblem& pb) {
  return {device_sm_count(), cluster_limits(pb)};
}

// Whether sparse_attention_block_kernel can run calls of these shapes (16-bit or e4m3 K/V,
// head dim 128, 128-key blocks) ...
bool block_kernel_shapes(const AttnProblem& pb) {
  const DType kv = pb.kv.k.dtype;
  const bool dtype_ok = kv == DType::kBF16 || kv == DType::kF16 || kv == DType::kE4M3;
  return dtype_ok && pb.head_dim() == kBlockDim && pb.kv.block_size() == kBlockKeys;
}

// ... and this call: Q rows it can read as 16-byte runs (pointer and row / head strides). The
// other calls run sparse_attention_kernel, which reads Q element by element.
bool block_kernel_fits(const AttnProblem& pb) {
  const int64_t per16 = 16 / dtype_size(pb.q.dtype);
  return block_kernel_shapes(pb) && reinterpret_cast<uintptr_t>(pb.q.data) % 16 == 0 &&
         pb.q.strides[0] % per16 == 0 && pb.q.strides[1] % per16 == 0;
}

// The split plan of a call with `rows` query rows (shapes and the device only), with the
// one-block kernel or without it.
AttnPlan plan_with(const AttnProblem& pb, int64_t rows, const DeviceLimits& dev, bool block) {
  return detail::plan_attention_launch(rows, pb.num_kv_heads() * head_chunks(pb), max_subtiles(pb),
                                       dev.sms, dev.clusters, block ? pb.topk.shape[2] : 0);
}

// The plan a call runs (its strides and Q's alignment decide whether the one-block kernel can);
// batch-invariant calls split every row the same way whatever the batch.
AttnPlan plan(const AttnProblem& pb, int64_t rows, const DeviceLimits& dev) {
  if (pb.batch_invariant) return detail::plan_attention_invariant(rows, max_subtiles(pb));
  return plan_with(pb, rows, dev, block_kernel_fits(pb));
}

size_t partial_out_bytes(const AttnProblem& pb, const AttnPlan& p) {
  return detail::align_up(
      static_cast<size_t>(p.splits * p.rows * pb.num_q_heads() * pb.head_dim()) * sizeof(float));
}

// Merge-kernel plans keep their partials in the workspace; in-cluster merges need none.
size_t plan_bytes(const AttnProblem& pb, const AttnPlan& p) {
  if (p.splits == 1 || p.cluster) return 0;
  return partial_out_bytes(pb, p) +
         detail::align_up(static_cast<size_t>(p.splits * p.rows * pb.num_q_heads()) *
                          sizeof(float));
}

// Fewer rows can mean more splits, so the workspace for a capacity of T rows is the largest need
// of any call with T' <= T rows: a workspace sized once at capacity then serves every smaller
// batch. Splits only happen below the policy's CTA target, which bounds the search. Where the
// shapes allow the one-block kernel, both plans count, with it and without it: whether it runs
// depends on Q's alignment, which the tensors the size was asked with need not share.
size_t workspace_bytes(const AttnProblem& pb, const DeviceLimits& dev) {
  if (pb.batch_invariant) return plan_bytes(pb, plan(pb, pb.num_rows(), dev));
  size_t bytes = 0;
  const int64_t limit = std::min<int64_t>(pb.num_rows(), detail::kAttnCtasPerSm * dev.sms);
  for (int64_t rows = 1; rows <= limit; ++rows) {
    bytes = std::max(bytes, plan_bytes(pb, plan_with(pb, rows, dev, false)));
    if (block_kernel_shapes(pb))
      bytes = std::max(bytes, plan_bytes(pb, plan_with(pb, rows, dev, true)));
  }
  return bytes;
}

Status check_supported(const AttnProblem& pb) {
  const int64_t d = pb.head_dim(), bs = pb.kv.block_size();
  if (d != 64 && d != 128) {
    return detail::not_supported("q: head_dim " + std::to_string(d) +
                                 " unsupported by the CUDA sparse attention (64 or 128)");
  }
  if (bs % 16 != 0) {
    return detail::not_supported("kv_cache: block size " + std::to_string(bs) +
                                 " unsupported by the CUDA sparse attention (multiple of 16)");
  }
  if (pb.topk.shape[2] > kMaxTopkWidth) {
    return detail::not_supported("topk: width " + std::to_string(pb.topk.shape[2]) +
                                 " above the CUDA sparse attention's 256");
  }
  const int64_t esize = dtype_size(pb.kv.k.dtype);
  const uintptr_t align = static_cast<uintptr_t>(8 * esize);
  for (const TensorView* side : {&pb.kv.k, &pb.kv.v}) {
    if (reinterpret_cast<uintptr_t>(side->data) % align != 0 || side->strides[0] % 8 != 0 ||
        side->strides[1] % 8 != 0 || side->strides[2] % 8 != 0) {
      return detail::not_supported(
          "kv_cache: the CUDA sparse attention loads 8 elements at a time and needs K and V "
          "aligned to " +
          std::to_string(align) + " bytes with page, head and token strides multiple of 8");
    }
  }
  for (const TensorView* side : {&pb.kv.k, &pb.kv.v}) {
    if (bs * side->strides[2] + d > 0x7FFFFFFF) {
      return detail::not_supported(
          "kv_cache: block_size x token stride must stay below 2^31 elements for the CUDA sparse "
          "attention (32-bit offsets within a page)");
    }
  }
  if (pb.num_rows() > 0x7FFFFFFF || pb.num_kv_heads() * head_chunks(pb) > 65535 ||
      pb.num_q_heads() > 65535) {
    return detail::not_supported("sparse attention: batch too large for one CUDA grid");
  }
  return Status::Ok();
}

template <typename CacheT>
Status launch_attention(const SparseAttnParams& prm, int64_t head_dim, bool block_ctas, dim3 grid,
                        cudaStream_t stream) {
  if (block_ctas) {
    auto kernel = sparse_attention_block_kernel<CacheT>;
    if constexpr (sizeof(CacheT) == 1) {
      if (prm.scale_mode == KvScaleMode::kPerTokenHead)
        kernel = sparse_attention_block_kernel<CacheT, true>;
    }
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBlockSmemBytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return Status(
          StatusCode::kCudaError,
          std::string("sparse_attention_block_kernel: shared memory: ") + cudaGetErrorString(e));
    }
    return launch_kernel("sparse_attention_block_kernel", kernel, grid, dim3(kBlockThreads),
                         kBlockSmemBytes, stream, prm);
  }
  const auto kernel = kernel_for<CacheT>(head_dim, prm.cluster, prm.scale_mode);
  if (!prm.cluster) {
    return launch_kernel("sparse_attention_kernel", kernel, grid, dim3(kAttnThreads), 0, stream,
                         prm);
  }
  return launch_kernel_clustered("sparse_attention_kernel", kernel, grid, dim3(kAttnThreads), 0,
                                 stream, dim3(1, 1, grid.z), prm);
}

Status run_problem(const AttnProblem& pb, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check_supported(pb));
  const DeviceLimits dev = device_limits(pb);
  MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, workspace_bytes(pb, dev)));
  const int64_t T = pb.num_rows();
  if (T == 0) return Status::Ok();
  const auto cuda_stream = static_cast<cudaStream_t>(stream.cuda_stream);
  const AttnPlan p = plan(pb, T, dev);

  SparseAttnParams prm = make_attn_params(pb);
  prm.splits = static_cast<int32_t>(p.splits);
  prm.subtiles_per_split = static_cast<int32_t>(p.subtiles_per_split);
  prm.cluster = p.cluster;
  if (p.splits > 1 && !p.cluster) {
    char* base = static_cast<char*>(workspace.data);
    prm.part_out = reinterpret_cast<float*>(base);
    prm.part_lse = reinterpret_cast<float*>(base + partial_out_bytes(pb, p));
  }

  const dim3 grid(static_cast<unsigned>(T),
                  static_cast<unsigned>(pb.num_kv_heads() * head_chunks(pb)),
                  static_cast<unsigned>(p.splits));
  switch (pb.kv.k.dtype) {
    case DType::kBF16:
      MSA_RETURN_IF_ERROR(
          launch_attention<__nv_bfloat16>(prm, pb.head_dim(), p.block_ctas, grid, cuda_stream));
      break;
    case DType::kF16:
      MSA_RETURN_IF_ERROR(
          launch_attention<__half>(prm, pb.head_dim(), p.block_ctas, grid, cuda_stream));
      break;
    default:
      MSA_RETURN_IF_ERROR(
          launch_attention<uint8_t>(prm, pb.head_dim(), p.block_ctas, grid, cuda_stream));
      break;
  }
  if (p.splits == 1 || p.cluster) return Status::Ok();
  const dim3 merge_grid(static_cast<unsigned>(T), static_cast<unsigned>(pb.num_q_heads()));
  // A dependent launch (programmatic): the merge CTAs start while the attention kernel writes its
  // partials and wait for them.
  const auto merge_kernel = p.splits <= 4    ? sparse_attention_merge_kernel<4>
                            : p.splits <= 8  ? sparse_attention_merge_kernel<8>
                            : p.splits <= 16 ? sparse_attention_merge_kernel<16>
                                             : sparse_attention_merge_kernel<32>;
  const AttnMergeParams mp = make_merge_params(prm, pb.head_dim());
  return launch_kernel_dependent("sparse_attention_merge_kernel", merge_kernel, merge_grid,
                                 dim3(static_cast<unsigned>(pb.head_dim())), 0, cuda_stream, mp);
}

}  // namespace

SparseAttnParams make_attn_params(const detail::AttentionProblem& pb) {
  SparseAttnParams prm;
  prm.q = pb.q.data;
  prm.q_dtype = pb.q.dtype;
  prm.q_stride_row = pb.q.strides[0];
  prm.q_stride_head = pb.q.strides[1];
  const KvCacheDevice kv = kv_cache_device(pb.kv);
  prm.k = kv.k;
  prm.v = kv.v;
  prm.k_stride_page = kv.k_stride[0];
  prm.k_stride_head = kv.k_stride[1];
  prm.k_stride_tok = kv.k_stride[2];
  prm.v_stride_page = kv.v_stride[0];
  prm.v_stride_head = kv.v_stride[1];
  prm.v_stride_tok = kv.v_stride[2];
  prm.num_cache_blocks = kv.num_blocks;
  prm.scale_mode = kv.scale_mode;
  prm.k_scale = kv.k_scale;
  prm.v_scale = kv.v_scale;
  prm.ks_stride_head = kv.k_scale_stride[0];
  prm.ks_stride_slot = kv.k_scale_stride[1];
  prm.vs_stride_head = kv.v_scale_stride[0];
  prm.vs_stride_slot = kv.v_scale_stride[1];
  prm.block_table = pb.block_table.ptr<const int32_t>();
  prm.bt_stride_req = pb.block_table.strides[0];
  prm.bt_stride_block = pb.block_table.strides[1];
  prm.rows = make_row_map(pb.seq_lens, pb.cu_seqlens_q, pb.query_len, pb.num_rows(),
                          pb.block_table.shape[1], pb.kv.block_size());
  prm.topk = pb.topk.ptr<const int32_t>();
  prm.tk_stride_head = pb.topk.strides[0];
  prm.tk_stride_row = pb.topk.strides[1];
  prm.tk_stride_col = pb.topk.strides[2];
  prm.topk_width = static_cast<int32_t>(pb.topk.shape[2]);
  prm.num_q_heads = static_cast<int32_t>(pb.num_q_heads());
  prm.group = static_cast<int32_t>(pb.group());
  prm.head_chunks = static_cast<int32_t>(head_chunks(pb));
  prm.scale_log2 = pb.scale() * kLog2e;
  prm.out = pb.out.data;
  prm.out_dtype = pb.out.dtype;
  prm.out_stride_row = pb.out.strides[0];
  prm.out_stride_head = pb.out.strides[1];
  prm.lse = pb.lse.defined() ? pb.lse.ptr<float>() : nullptr;
  prm.lse_stride_row = pb.lse.defined() ? pb.lse.strides[0] : 0;
  prm.lse_stride_head = pb.lse.defined() ? pb.lse.strides[1] : 0;
  prm.error_flags = pb.error_flags.defined() ? pb.error_flags.ptr<int32_t>() : nullptr;
  prm.splits = 1;
  prm.subtiles_per_split = static_cast<int32_t>(max_subtiles(pb));
  prm.cluster = false;
  prm.part_out = nullptr;
  prm.part_lse = nullptr;
  return prm;
}

Status attention_supported(const detail::AttentionProblem& pb) { return check_supported(pb); }

bool attention_block_kernel_fits(const detail::AttentionProblem& pb) {
  return block_kernel_fits(pb);
}

AttnMergeParams make_merge_params(const SparseAttnParams& prm, int64_t head_dim) {
  AttnMergeParams mp;
  mp.part_out = prm.part_out;
  mp.part_lse = prm.part_lse;
  mp.out = prm.out;
  mp.lse = prm.lse;
  mp.num_rows = prm.rows.num_rows;
  mp.num_q_heads = prm.num_q_heads;
  mp.head_dim = head_dim;
  mp.out_stride_row = prm.out_stride_row;
  mp.out_stride_head = prm.out_stride_head;
  mp.lse_stride_row = prm.lse_stride_row;
  mp.lse_stride_head = prm.lse_stride_head;
  mp.splits = prm.splits;
  mp.out_dtype = prm.out_dtype;
  return mp;
}

Status workspace_size(const SparseAttentionDecodeArgs& args, size_t* bytes) {
  const AttnProblem pb = detail::attention_problem(args);
  *bytes = workspace_bytes(pb, device_limits(pb));
  return Status::Ok();
}

Status run(const SparseAttentionDecodeArgs& args, Workspace workspace, Stream stream) {
  return run_problem(detail::attention_problem(args), workspace, stream);
}

// Prefill calls whose shapes suit the tensor-core kernel (prefill::attention_supported) run it;
// the others the split-K kernels above. The workspace covers either.
Status workspace_size(const SparseAttentionPrefillArgs& args, size_t* bytes) {
  const AttnProblem pb = detail::attention_problem(args);
  *bytes = std::max(workspace_bytes(pb, device_limits(pb)), prefill::attention_workspace_bytes(pb));
  return Status::Ok();
}

Status run(const SparseAttentionPrefillArgs& args, Workspace workspace, Stream stream) {
  const AttnProblem pb = detail::attention_problem(args);
  if (prefill::attention_supported(pb)) {
    MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, prefill::attention_workspace_bytes(pb)));
    return prefill::run_attention(pb, workspace, stream);
  }
  return run_problem(pb, workspace, stream);
}

}  // namespace cuda
}  // namespace msa
