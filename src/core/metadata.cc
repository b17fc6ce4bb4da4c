// Public entry points of the batch metadata op (spec A8): host validation shared by every
// backend, then dispatch to the backend of the tensors' device.
#include "msa/metadata.h"

#include <string>

#include "core/dispatch.h"
#include "core/validate.h"

namespace msa {

using detail::invalid;

namespace {

constexpr int kMaxDecodeQueryLen = 8;

// A rank-1 i32/i64 tensor of exactly `length` elements on `device`, when given (or required).
Status check_vector(const TensorView& t, const char* name, int64_t length, const char* what,
                    DType dtype, const Device& device, bool required) {
  if (!t.defined() && !required) return Status::Ok();
  MSA_RETURN_IF_ERROR(detail::require_ndim(t, name, 1));
  MSA_RETURN_IF_ERROR(detail::require_dim(t, name, 0, length, what));
  MSA_RETURN_IF_ERROR(detail::require_dtype(t, name, {dtype}));
  return detail::require_device(t, name, device);
}

// A rank-1 per-token output of any capacity.
Status check_token_output(const TensorView& t, const char* name, DType dtype,
                          const Device& device) {
  if (!t.defined()) return Status::Ok();
  MSA_RETURN_IF_ERROR(detail::require_ndim(t, name, 1));
  MSA_RETURN_IF_ERROR(detail::require_dtype(t, name, {dtype}));
  return detail::require_device(t, name, device);
}

Status check_block_table(const TensorView& t, const char* name, int64_t batch,
                         const Device& device) {
  MSA_RETURN_IF_ERROR(detail::require_ndim(t, name, 2));
  MSA_RETURN_IF_ERROR(detail::require_dim(t, name, 0, batch, "the batch size B"));
  MSA_RETURN_IF_ERROR(detail::require_dtype(t, name, {DType::kI32}));
  return detail::require_device(t, name, device);
}

}  // namespace

Status check(const BatchMetadataArgs& args) {
  MSA_RETURN_IF_ERROR(detail::require_ndim(args.query_lens, "query_lens", 1));
  MSA_RETURN_IF_ERROR(detail::require_dtype(args.query_lens, "query_lens", {DType::kI32}));
  const Device device = args.query_lens.device;
  const int64_t batch = args.query_lens.shape[0];

  if (args.decode_query_len < 1 || args.decode_query_len > kMaxDecodeQueryLen) {
    return invalid("decode_query_len: " + std::to_string(args.decode_query_len) +
                   ", expected 1..8 (1 plus speculative tokens)");
  }
  if (args.num_decode_requests < 0 || args.num_decode_requests > batch) {
    return invalid("num_decode_requests: " + std::to_string(args.num_decode_requests) +
                   ", expected 0..B = " + std::to_string(batch));
  }
  if (args.block_size <= 0) {
    return invalid("block_size: " + std::to_string(args.block_size) + ", expected > 0");
  }
  const int64_t num_prefills = batch - args.num_decode_requests;
  // batch + 1 entries (the outputs are int32 offsets; a batch this large fails on its values).
  int64_t batch_entries = 0;
  MSA_RETURN_IF_ERROR(detail::checked_add(batch, 1, "query_lens: B + 1", &batch_entries));

  MSA_RETURN_IF_ERROR(check_vector(args.seq_lens, "seq_lens", batch, "the batch size B",
                                   DType::kI32, device, true));
  if (args.slot_mapping.defined() && !args.block_table.defined()) {
    return invalid("block_table: required when slot_mapping is given");
  }
  if (args.block_table.defined()) {
    MSA_RETURN_IF_ERROR(check_block_table(args.block_table, "block_table", batch, device));
  }
  if (args.index_slot_mapping.defined() && !args.index_block_table.defined()) {
    return invalid("index_block_table: required when index_slot_mapping is given");
  }
  if (args.index_block_table.defined()) {
    MSA_RETURN_IF_ERROR(
        check_block_table(args.index_block_table, "index_block_table", batch, device));
  }

  MSA_RETURN_IF_ERROR(check_vector(args.query_start_loc, "query_start_loc", batch_entries, "B + 1",
                                   DType::kI32, device, false));
  MSA_RETURN_IF_ERROR(check_vector(args.prefill_cu_seqlens_q, "prefill_cu_seqlens_q",
                                   num_prefills + 1, "prefill requests + 1", DType::kI32, device,
                                   false));
  MSA_RETURN_IF_ERROR(check_vector(args.prefill_cu_seqlens_k, "prefill_cu_seqlens_k",
                                   num_prefills + 1, "prefill requests + 1", DType::kI32, device,
                                   false));
  MSA_RETURN_IF_ERROR(check_vector(args.context_lens, "context_lens", batch, "the batch size B",
                                   DType::kI32, device, false));
  MSA_RETURN_IF_ERROR(check_vector(args.kv_block_counts, "kv_block_counts", batch,
                                   "the batch size B", DType::kI32, device, false));
  MSA_RETURN_IF_ERROR(check_token_output(args.token_request, "token_request", DType::kI32, device));
  MSA_RETURN_IF_ERROR(
      check_token_output(args.token_position, "token_position", DType::kI32, device));
  MSA_RETURN_IF_ERROR(check_token_output(args.slot_mapping, "slot_mapping", DType::kI64, device));
  MSA_RETURN_IF_ERROR(
      check_token_output(args.index_slot_mapping, "index_slot_mapping", DType::kI64, device));
  MSA_RETURN_IF_ERROR(
      check_vector(args.totals, "totals", 4, "4 counters", DType::kI32, device, false));
  return detail::check_error_flags(args.error_flags, device);
}

Status workspace_size(const BatchMetadataArgs& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_workspace_size(args, args.query_lens.device, bytes);
}

Status run(const BatchMetadataArgs& args, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_run(args, args.query_lens.device, workspace, stream);
}

}  // namespace msa
