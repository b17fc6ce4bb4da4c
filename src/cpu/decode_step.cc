// CPU backend of the sparse decode step: the index top-k op, then sparse attention.
#include "core/backends.h"
#include "core/decode_step_chain.h"

namespace msa {
namespace cpu {
namespace {

const detail::DecodeStepOps kOps = {&workspace_size, &workspace_size, &run, &run};

}  // namespace

Status workspace_size(const SparseDecodeStepArgs& args, size_t* bytes) {
  return detail::chain_workspace_size(kOps, args, bytes);
}

Status run(const SparseDecodeStepArgs& args, Workspace workspace, Stream stream) {
  return detail::run_chain(kOps, args, workspace, stream);
}

}  // namespace cpu
}  // namespace msa
