// Public entry points of the indexer top-k ops (spec A2-A4, A8, A12): host validation shared by
// every backend, then dispatch to the backend of the tensors' device.
#include <string>

#include "core/dispatch.h"
#include "core/validate.h"
#include "msa/indexer.h"

namespace msa {
namespace {

using detail::invalid;

// Checks shared by the decode and prefill forms. `num_rows` is T, the number of query rows.
Status check_common(const IndexTopkParams& params, const TensorView& index_q,
                    const TensorView& index_cache, const TensorView& block_table,
                    const TensorView& seq_lens, const TensorView& topk_out,
                    const TensorView& error_flags) {
  MSA_RETURN_IF_ERROR(detail::require_ndim(index_q, "index_q", 3));
  MSA_RETURN_IF_ERROR(detail::require_dtype(index_q, "index_q", {DType::kBF16, DType::kE4M3}));
  MSA_RETURN_IF_ERROR(detail::require_unit_last_stride(index_q, "index_q"));
  const Device device = index_q.device;
  int64_t items = 0;  // (row, head) pairs
  MSA_RETURN_IF_ERROR(
      detail::checked_mul(index_q.shape[0], index_q.shape[1], "index_q: T * H_idx", &items));

  MSA_RETURN_IF_ERROR(detail::require_ndim(index_cache, "index_cache", 3));
  MSA_RETURN_IF_ERROR(
      detail::require_dtype(index_cache, "index_cache", {DType::kBF16, DType::kE4M3}));
  MSA_RETURN_IF_ERROR(detail::require_device(index_cache, "index_cache", device));
  MSA_RETURN_IF_ERROR(detail::require_unit_last_stride(index_cache, "index_cache"));
  MSA_RETURN_IF_ERROR(
      detail::require_dim(index_cache, "index_cache", 2, index_q.shape[2], "index_q head dim"));
  MSA_RETURN_IF_ERROR(detail::require_dim_at_least(index_cache, "index_cache", 1, 1, "block_size"));
  int64_t slots = 0;
  MSA_RETURN_IF_ERROR(detail::checked_mul(index_cache.shape[0], index_cache.shape[1],
                                          "index_cache: num_blocks * block_size", &slots));

  MSA_RETURN_IF_ERROR(detail::require_ndim(seq_lens, "seq_lens", 1));
  MSA_RETURN_IF_ERROR(detail::require_dtype(seq_lens, "seq_lens", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(seq_lens, "seq_lens", device));
  const int64_t num_requests = seq_lens.shape[0];

  MSA_RETURN_IF_ERROR(detail::require_ndim(block_table, "block_table", 2));
  MSA_RETURN_IF_ERROR(detail::require_dtype(block_table, "block_table", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(block_table, "block_table", device));
  MSA_RETURN_IF_ERROR(
      detail::require_dim(block_table, "block_table", 0, num_requests, "num_requests"));

  MSA_RETURN_IF_ERROR(detail::require_ndim(topk_out, "topk_out", 3));
  MSA_RETURN_IF_ERROR(detail::require_dtype(topk_out, "topk_out", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(topk_out, "topk_out", device));
  MSA_RETURN_IF_ERROR(detail::require_unit_last_stride(topk_out, "topk_out"));
  MSA_RETURN_IF_ERROR(
      detail::require_dim(topk_out, "topk_out", 0, index_q.shape[1], "index_q heads H_idx"));
  MSA_RETURN_IF_ERROR(
      detail::require_dim_at_least(topk_out, "topk_out", 1, index_q.shape[0], "rows T"));

  if (params.topk < 1 || params.topk > topk_out.shape[2]) {
    return invalid("params.topk: " + std::to_string(params.topk) +
                   " outside [1, topk_out.shape[2] = " + std::to_string(topk_out.shape[2]) +
                   "] (top-k above the output capacity)");
  }
  if (params.init_blocks < 0) {
    return invalid("params.init_blocks: " + std::to_string(params.init_blocks) + ", expected >= 0");
  }
  if (params.local_blocks < 0) {
    return invalid("params.local_blocks: " + std::to_string(params.local_blocks) +
                   ", expected >= 0");
  }
  return detail::check_error_flags(error_flags, device);
}

}  // namespace

Status check(const IndexTopkDecodeArgs& args) {
  MSA_RETURN_IF_ERROR(check_common(args.params, args.index_q, args.index_cache, args.block_table,
                                   args.seq_lens, args.topk_out, args.error_flags));
  if (args.query_len < 1 || args.query_len > 8) {
    return invalid("query_len: " + std::to_string(args.query_len) +
                   ", expected 1..8 (1 + speculative tokens)");
  }
  int64_t num_rows = 0;
  MSA_RETURN_IF_ERROR(detail::checked_mul(args.seq_lens.shape[0], args.query_len,
                                          "seq_lens: num_requests * query_len", &num_rows));
  return detail::require_dim(args.index_q, "index_q", 0, num_rows, "num_requests * query_len");
}

Status workspace_size(const IndexTopkDecodeArgs& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_workspace_size(args, args.index_q.device, bytes);
}

Status run(const IndexTopkDecodeArgs& args, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_run(args, args.index_q.device, workspace, stream);
}

Status check(const IndexTopkPrefillArgs& args) {
  MSA_RETURN_IF_ERROR(check_common(args.params, args.index_q, args.index_cache, args.block_table,
                                   args.seq_lens, args.topk_out, args.error_flags));
  MSA_RETURN_IF_ERROR(detail::require_ndim(args.cu_seqlens_q, "cu_seqlens_q", 1));
  MSA_RETURN_IF_ERROR(detail::require_dtype(args.cu_seqlens_q, "cu_seqlens_q", {DType::kI32}));
  MSA_RETURN_IF_ERROR(
      detail::require_device(args.cu_seqlens_q, "cu_seqlens_q", args.index_q.device));
  int64_t entries = 0;
  MSA_RETURN_IF_ERROR(
      detail::checked_add(args.seq_lens.shape[0], 1, "seq_lens: num_requests + 1", &entries));
  return detail::require_dim(args.cu_seqlens_q, "cu_seqlens_q", 0, entries, "num_requests + 1");
}

Status workspace_size(const IndexTopkPrefillArgs& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_workspace_size(args, args.index_q.device, bytes);
}

Status run(const IndexTopkPrefillArgs& args, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_run(args, args.index_q.device, workspace, stream);
}

}  // namespace msa
