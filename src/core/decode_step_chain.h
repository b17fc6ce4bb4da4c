// The decode step as its two ops on one backend (msa/decode_step.h): the CPU backend always runs
// it so, the CUDA backend where the launch policy does not take the persistent kernel.
#pragma once

#include <algorithm>

#include "core/validate.h"
#include "msa/decode_step.h"

namespace msa {
namespace detail {

// One backend's entry points of the two ops.
struct DecodeStepOps {
  Status (*index_workspace)(const IndexTopkDecodeArgs&, size_t*);
  Status (*attention_workspace)(const SparseAttentionDecodeArgs&, size_t*);
  Status (*run_index)(const IndexTopkDecodeArgs&, Workspace, Stream);
  Status (*run_attention)(const SparseAttentionDecodeArgs&, Workspace, Stream);
};

// The ops run in stream order and the attention op reads nothing of the index op's workspace,
// so one buffer of the larger size serves both.
inline Status chain_workspace_size(const DecodeStepOps& ops, const SparseDecodeStepArgs& args,
                                   size_t* bytes) {
  size_t index_bytes = 0, attention_bytes = 0;
  MSA_RETURN_IF_ERROR(ops.index_workspace(args.index, &index_bytes));
  MSA_RETURN_IF_ERROR(ops.attention_workspace(args.attention, &attention_bytes));
  *bytes = std::max(index_bytes, attention_bytes);
  return Status::Ok();
}

inline Status run_chain(const DecodeStepOps& ops, const SparseDecodeStepArgs& args,
                        Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(ops.run_index(args.index, workspace, stream));
  return ops.run_attention(args.attention, workspace, stream);
}

}  // namespace detail
}  // namespace msa
