// Public entry points of the page-16 sparse block table op (spec A10, B3.4): host-side
// validation shared by every backend, then dispatch to the backend of the tensors' device.
#include <string>

#include "core/dispatch.h"
#include "core/validate.h"
#include "msa/indexer.h"

namespace msa {

using detail::invalid;

Status check(const SparsePage16Args& args) {
  if (args.block_size <= 0 || args.block_size % 16 != 0) {
    return invalid("block_size: is " + std::to_string(args.block_size) +
                   ", expected a positive multiple of 16");
  }
  const int64_t pages_per_block = args.block_size / 16;
  if ((args.page_stride != 8 && args.page_stride != 16) || args.page_stride < pages_per_block) {
    return invalid(
        "page_stride: is " + std::to_string(args.page_stride) +
        ", expected 8 or 16 and at least block_size / 16 = " + std::to_string(pages_per_block));
  }
  if (args.query_len < 1 || args.query_len > 8) {
    return invalid("query_len: is " + std::to_string(args.query_len) + ", expected 1..8");
  }
  MSA_RETURN_IF_ERROR(detail::require_ndim(args.topk, "topk", 3));
  MSA_RETURN_IF_ERROR(detail::require_dtype(args.topk, "topk", {DType::kI32}));
  const Device device = args.topk.device;
  const int64_t num_kv_heads = args.topk.shape[0];
  MSA_RETURN_IF_ERROR(detail::require_dim_at_least(args.topk, "topk", 0, 1, "one KV head"));
  MSA_RETURN_IF_ERROR(detail::require_dim_at_least(args.topk, "topk", 2, 1, "one top-k entry"));

  MSA_RETURN_IF_ERROR(detail::require_ndim(args.block_table, "block_table", 2));
  MSA_RETURN_IF_ERROR(detail::require_dtype(args.block_table, "block_table", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(args.block_table, "block_table", device));
  const int64_t num_requests = args.block_table.shape[0];
  int64_t num_rows = 0, table_rows = 0, table_width = 0;
  MSA_RETURN_IF_ERROR(detail::checked_mul(num_requests, args.query_len,
                                          "block_table: num_requests * query_len", &num_rows));
  MSA_RETURN_IF_ERROR(detail::checked_mul(
      num_rows, num_kv_heads, "topk: T * num_kv_heads (num_requests * query_len * shape[0])",
      &table_rows));
  MSA_RETURN_IF_ERROR(detail::checked_mul(args.topk.shape[2], pages_per_block,
                                          "topk: K * block_size / 16", &table_width));
  // Page-16 ids (page * page_stride + j) * num_kv_heads + h are int32.
  const int64_t max_kv_heads = (int64_t{1} << 31) / args.page_stride;
  if (num_kv_heads > max_kv_heads) {
    return invalid("topk: shape[0] (num_kv_heads) is " + std::to_string(num_kv_heads) +
                   ", expected at most 2^31 / page_stride = " + std::to_string(max_kv_heads) +
                   " (page-16 ids are int32)");
  }

  MSA_RETURN_IF_ERROR(detail::require_ndim(args.seq_lens, "seq_lens", 1));
  MSA_RETURN_IF_ERROR(detail::require_dtype(args.seq_lens, "seq_lens", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(args.seq_lens, "seq_lens", device));
  MSA_RETURN_IF_ERROR(detail::require_dim(args.seq_lens, "seq_lens", 0, num_requests,
                                          "num_requests (block_table.shape[0])"));
  MSA_RETURN_IF_ERROR(
      detail::require_dim_at_least(args.topk, "topk", 1, num_rows, "T = num_requests * query_len"));

  MSA_RETURN_IF_ERROR(detail::require_ndim(args.table_out, "table_out", 2));
  MSA_RETURN_IF_ERROR(detail::require_dtype(args.table_out, "table_out", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(args.table_out, "table_out", device));
  MSA_RETURN_IF_ERROR(
      detail::require_dim(args.table_out, "table_out", 0, table_rows, "T * num_kv_heads"));
  MSA_RETURN_IF_ERROR(
      detail::require_dim(args.table_out, "table_out", 1, table_width, "K * block_size / 16"));

  MSA_RETURN_IF_ERROR(detail::require_ndim(args.context_lens_out, "context_lens_out", 1));
  MSA_RETURN_IF_ERROR(
      detail::require_dtype(args.context_lens_out, "context_lens_out", {DType::kI32}));
  MSA_RETURN_IF_ERROR(detail::require_device(args.context_lens_out, "context_lens_out", device));
  MSA_RETURN_IF_ERROR(detail::require_dim(args.context_lens_out, "context_lens_out", 0, table_rows,
                                          "T * num_kv_heads"));
  return detail::check_error_flags(args.error_flags, device);
}

Status workspace_size(const SparsePage16Args& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_workspace_size(args, args.topk.device, bytes);
}

Status run(const SparsePage16Args& args, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_run(args, args.topk.device, workspace, stream);
}

}  // namespace msa
