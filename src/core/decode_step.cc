// Public entry points of the sparse decode step (msa/decode_step.h): each half validated as its
// own op, then the checks that they describe one step, then dispatch.
#include "msa/decode_step.h"

#include <string>

#include "core/dispatch.h"
#include "core/validate.h"

namespace msa {
namespace {

using detail::invalid;

// Whether two views are the same tensor: data, dtype, device, shape and strides; or both absent
// (an optional tensor given to neither half, whatever its unused fields hold).
bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data == nullptr && b.data == nullptr) return true;
  if (a.data != b.data || a.dtype != b.dtype || a.device != b.device || a.ndim != b.ndim ||
      !a.valid_rank()) {
    return false;
  }
  for (int d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != b.shape[d] || a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

}  // namespace

Status check(const SparseDecodeStepArgs& args) {
  MSA_RETURN_IF_ERROR(check(args.index));
  MSA_RETURN_IF_ERROR(check(args.attention));
  const IndexTopkDecodeArgs& idx = args.index;
  const SparseAttentionDecodeArgs& attn = args.attention;
  if (!same_view(attn.topk, idx.topk_out)) {
    return invalid("attention.topk: must be the same view as index.topk_out (shape " +
                   detail::shape_string(idx.topk_out) + "), got " +
                   detail::shape_string(attn.topk));
  }
  if (attn.query_len != idx.query_len) {
    return invalid("attention.query_len: " + std::to_string(attn.query_len) +
                   ", expected index.query_len = " + std::to_string(idx.query_len));
  }
  if (!same_view(attn.seq_lens, idx.seq_lens)) {
    return invalid("attention.seq_lens: must be the same view as index.seq_lens");
  }
  if (!same_view(attn.error_flags, idx.error_flags)) {
    return invalid("attention.error_flags: must be the same view as index.error_flags");
  }
  if (attn.batch_invariant != idx.batch_invariant) {
    return invalid("attention.batch_invariant: must equal index.batch_invariant");
  }
  return detail::require_device(attn.q, "attention.q", idx.index_q.device);
}

Status workspace_size(const SparseDecodeStepArgs& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_workspace_size(args, args.index.index_q.device, bytes);
}

Status run(const SparseDecodeStepArgs& args, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_run(args, args.index.index_q.device, workspace, stream);
}

}  // namespace msa
