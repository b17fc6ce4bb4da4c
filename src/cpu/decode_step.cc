// CPU backend of the sparse decode step: the index top-k op, then sparse attention.
//
// The CPU ops validate every value before writing anything (docs/api.md), and so does the step:
// the index half writes its top-k rows into the workspace, the attention half reads them there,
// and they reach topk_out only after the attention half has run. A bad value in the attention
// half (a page of its own block table) then leaves topk_out as it was, just as a bad value in
// the index half leaves out and lse as they were.
#include "core/backends.h"
#include "core/decode_step_chain.h"
#include "core/validate.h"

namespace msa {
namespace cpu {
namespace {

// The step's top-k rows as the index half writes them: [index heads, decode rows, top-k] int32.
struct TopkStage {
  int64_t heads = 0, rows = 0, width = 0;
  size_t bytes = 0;  // rounded up to the workspace alignment
};

Status topk_stage(const SparseDecodeStepArgs& args, TopkStage* s) {
  const TensorView& out = args.index.topk_out;
  s->heads = out.shape[0];
  s->width = out.shape[2];
  MSA_RETURN_IF_ERROR(detail::checked_mul(args.index.seq_lens.shape[0], args.index.query_len,
                                          "index.seq_lens rows", &s->rows));
  int64_t row_elems = 0, elems = 0;
  MSA_RETURN_IF_ERROR(detail::checked_mul(s->heads, s->width, "index.topk_out", &row_elems));
  MSA_RETURN_IF_ERROR(detail::checked_mul(row_elems, s->rows, "index.topk_out", &elems));
  int64_t bytes = 0;
  MSA_RETURN_IF_ERROR(detail::checked_mul(elems, 4, "index.topk_out bytes", &bytes));
  s->bytes = detail::align_up(static_cast<size_t>(bytes));
  return Status::Ok();
}

const detail::DecodeStepOps kOps = {&workspace_size, &workspace_size, &run, &run};

// The workspace: the staged top-k rows, then the buffer the two ops share.
Status workspace_layout(const SparseDecodeStepArgs& args, TopkStage* stage, size_t* bytes) {
  MSA_RETURN_IF_ERROR(topk_stage(args, stage));
  size_t ops = 0;
  MSA_RETURN_IF_ERROR(detail::chain_workspace_size(kOps, args, &ops));
  *bytes = stage->bytes + ops;
  return Status::Ok();
}

}  // namespace

Status workspace_size(const SparseDecodeStepArgs& args, size_t* bytes) {
  TopkStage stage;
  return workspace_layout(args, &stage, bytes);
}

Status run(const SparseDecodeStepArgs& args, Workspace workspace, Stream stream) {
  TopkStage stage;
  size_t needed = 0;
  MSA_RETURN_IF_ERROR(workspace_layout(args, &stage, &needed));
  MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, needed));
  char* base = static_cast<char*>(workspace.data);
  const TensorView staged = make_tensor(base, DType::kI32, {stage.heads, stage.rows, stage.width});
  SparseDecodeStepArgs a = args;
  a.index.topk_out = staged;
  a.attention.topk = staged;
  const Workspace rest{base + stage.bytes, workspace.bytes - stage.bytes};
  MSA_RETURN_IF_ERROR(detail::run_chain(kOps, a, rest, stream));
  // Both halves passed: the rows go to the caller's (strided) view.
  const TensorView& out = args.index.topk_out;
  const int32_t* src = staged.ptr<int32_t>();
  for (int64_t h = 0; h < stage.heads; ++h) {
    for (int64_t t = 0; t < stage.rows; ++t) {
      for (int64_t i = 0; i < stage.width; ++i) {
        *(out.ptr<int32_t>() + h * out.strides[0] + t * out.strides[1] + i * out.strides[2]) =
            src[(h * stage.rows + t) * stage.width + i];
      }
    }
  }
  return Status::Ok();
}

}  // namespace cpu
}  // namespace msa
