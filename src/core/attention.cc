// Public entry points of the attention ops (sparse decode, sparse prefill, dense): host-side
// validation shared by every backend, then dispatch to the backend of the tensors' device.
#include "msa/attention.h"

#include <cmath>
#include <string>

#include "core/attention_problem.h"
#include "core/dispatch.h"
#include "core/validate.h"

namespace msa {
namespace {

using detail::invalid;

// The fields every attention form has (detail::AttentionProblem), so one routine validates
// them all.
Status check_common(const detail::AttentionProblem& a) {
  if (!std::isfinite(a.softmax_scale)) {
    return invalid("softmax_scale: must be finite (0 selects head_dim^-0.5), got " +
                   std::to_string(a.softmax_scale));
  }
  MSA_RETURN_IF_ERROR(detail::require_ndim(a.q, "q", 3));
  MSA_RETURN_IF_ERROR(detail::require_dtype(a.q, "q", {DType::kBF16, DType::kF16, DType::kF32}));
  MSA_RETURN_IF_ERROR(detail::require_unit_last_stride(a.q, "q"));
  const Device device = a.q.device;
  MSA_RETURN_IF_ERROR(detail::check_kv_cache(a.kv, "kv_cache", device));

  const int64_t hq = a.q.shape[1];
  const int64_t hkv = a.kv.num_kv_heads();
  const int64_t d = a.kv.head_dim();
  if (d <= 0 || a.kv.block_size() <= 0) {
    return invalid("kv_cache.k: block_size and head_dim must be positive, got shape " +
                   detail::shape_string(a.kv.k));
  }
  MSA_RETURN_IF_ERROR(detail::require_dim(a.q, "q", 2, d, "the cache head_dim"));
  int64_t heads = 0;  // (row, q head) pairs
  MSA_RETURN_IF_ERROR(detail::checked_mul(a.q.shape[0], hq, "q: T * num_q_heads", &heads));
  if (hkv <= 0 || hq <= 0 || hq % hkv != 0) {
    return invalid("q: shape[1] (num_q_heads) is " + std::to_string(hq) +
                   ", expected a positive multiple of the cache's num_kv_heads " +
                   std::to_string(hkv));
  }

  MSA_RETURN_IF_ERROR(detail::require_ndim(a.block_table, "block_table", 2));
  MSA_RETURN_IF_ERROR(detail::require_dtype(a.block_table, "block_table", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(a.block_table, "block_table", device));
  const int64_t num_requests = a.block_table.shape[0];

  MSA_RETURN_IF_ERROR(detail::require_ndim(a.seq_lens, "seq_lens", 1));
  MSA_RETURN_IF_ERROR(detail::require_dtype(a.seq_lens, "seq_lens", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(a.seq_lens, "seq_lens", device));
  MSA_RETURN_IF_ERROR(detail::require_dim(a.seq_lens, "seq_lens", 0, num_requests,
                                          "num_requests (block_table.shape[0])"));

  MSA_RETURN_IF_ERROR(detail::require_ndim(a.out, "out", 3));
  for (int k = 0; k < 3; ++k) {
    MSA_RETURN_IF_ERROR(detail::require_dim(a.out, "out", k, a.q.shape[k], "q's shape"));
  }
  if (a.out.dtype != a.q.dtype && a.out.dtype != DType::kF32) {
    return invalid(std::string("out: dtype is ") + dtype_name(a.out.dtype) + ", expected " +
                   dtype_name(a.q.dtype) + " (q's dtype) or f32");
  }
  MSA_RETURN_IF_ERROR(detail::require_unit_last_stride(a.out, "out"));
  MSA_RETURN_IF_ERROR(detail::require_device(a.out, "out", device));

  if (a.lse.defined()) {
    MSA_RETURN_IF_ERROR(detail::require_ndim(a.lse, "lse", 2));
    MSA_RETURN_IF_ERROR(detail::require_dim(a.lse, "lse", 0, a.q.shape[0], "T (q.shape[0])"));
    MSA_RETURN_IF_ERROR(detail::require_dim(a.lse, "lse", 1, hq, "num_q_heads"));
    MSA_RETURN_IF_ERROR(detail::require_dtype(a.lse, "lse", {DType::kF32}));
    MSA_RETURN_IF_ERROR(detail::require_device(a.lse, "lse", device));
  }
  return detail::check_error_flags(a.error_flags, device);
}

Status check_topk(const TensorView& topk, int64_t num_kv_heads, int64_t num_rows,
                  const Device& device) {
  MSA_RETURN_IF_ERROR(detail::require_ndim(topk, "topk", 3));
  MSA_RETURN_IF_ERROR(detail::require_dtype(topk, "topk", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(topk, "topk", device));
  MSA_RETURN_IF_ERROR(
      detail::require_dim(topk, "topk", 0, num_kv_heads, "num_kv_heads (one index head each)"));
  MSA_RETURN_IF_ERROR(detail::require_dim_at_least(topk, "topk", 1, num_rows, "T"));
  return detail::require_dim_at_least(topk, "topk", 2, 1, "one top-k entry");
}

Status check_cu_seqlens(const TensorView& cu, int64_t num_requests, const Device& device) {
  MSA_RETURN_IF_ERROR(detail::require_ndim(cu, "cu_seqlens_q", 1));
  MSA_RETURN_IF_ERROR(detail::require_dtype(cu, "cu_seqlens_q", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(cu, "cu_seqlens_q", device));
  int64_t entries = 0;
  MSA_RETURN_IF_ERROR(
      detail::checked_add(num_requests, 1, "block_table: num_requests + 1", &entries));
  return detail::require_dim(cu, "cu_seqlens_q", 0, entries, "num_requests + 1");
}

}  // namespace

Status check(const SparseAttentionDecodeArgs& args) {
  MSA_RETURN_IF_ERROR(check_common(detail::attention_problem(args)));
  if (args.query_len < 1 || args.query_len > 8) {
    return invalid("query_len: is " + std::to_string(args.query_len) + ", expected 1..8");
  }
  int64_t num_rows = 0;
  MSA_RETURN_IF_ERROR(detail::checked_mul(args.block_table.shape[0], args.query_len,
                                          "block_table: num_requests * query_len", &num_rows));
  MSA_RETURN_IF_ERROR(
      detail::require_dim(args.q, "q", 0, num_rows, "T = num_requests * query_len"));
  return check_topk(args.topk, args.kv_cache.num_kv_heads(), args.q.shape[0], args.q.device);
}

Status workspace_size(const SparseAttentionDecodeArgs& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_workspace_size(args, args.q.device, bytes);
}

Status run(const SparseAttentionDecodeArgs& args, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_run(args, args.q.device, workspace, stream);
}

Status check(const SparseAttentionPrefillArgs& args) {
  MSA_RETURN_IF_ERROR(check_common(detail::attention_problem(args)));
  MSA_RETURN_IF_ERROR(
      check_cu_seqlens(args.cu_seqlens_q, args.block_table.shape[0], args.q.device));
  return check_topk(args.topk, args.kv_cache.num_kv_heads(), args.q.shape[0], args.q.device);
}

Status workspace_size(const SparseAttentionPrefillArgs& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_workspace_size(args, args.q.device, bytes);
}

Status run(const SparseAttentionPrefillArgs& args, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_run(args, args.q.device, workspace, stream);
}

Status check(const DenseAttentionArgs& args) {
  MSA_RETURN_IF_ERROR(check_common(detail::attention_problem(args)));
  return check_cu_seqlens(args.cu_seqlens_q, args.block_table.shape[0], args.q.device);
}

Status workspace_size(const DenseAttentionArgs& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_workspace_size(args, args.q.device, bytes);
}

Status run(const DenseAttentionArgs& args, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_run(args, args.q.device, workspace, stream);
}

}  // namespace msa
