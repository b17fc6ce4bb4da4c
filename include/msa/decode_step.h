// The sparse decode step as one op: the indexer's top-k over the decode rows (spec A2-A4) and
// sparse attention over the blocks it selects (spec A5), in that order, on one stream.
#pragma once

#include "msa/attention.h"
#include "msa/indexer.h"
#include "msa/tensor.h"

namespace msa {

// Exactly run(index), then run(attention): the same top-k rows in index.topk_out and the same
// out / lse within each backend's documented arithmetic (docs/numerics.md). attention.topk is
// index.topk_out (the same view: one index head per KV head), and both halves describe the same
// decode batch (query_len, seq_lens, error_flags the same views); each half keeps its own block
// table (index-cache pages, main-cache pages). A bad value inside a tensor of either half is the
// step's: on the CPU it returns kOutOfRange and writes nothing but its error bit (the top-k rows
// wait in the workspace until the attention half has passed, so topk_out too stays as it was),
// on CUDA the kernels skip the bad item and set the bit (docs/api.md).
//
// On CUDA the launch policy (core/launch_policy.h, decode_step_takes_persistent) runs small
// batches as one persistent kernel (docs/decode_step.md): the same top-k bits and, for the
// shapes it takes, the same out / lse bits as the two ops. Other calls run the two ops.
struct SparseDecodeStepArgs {
  IndexTopkDecodeArgs index;
  SparseAttentionDecodeArgs attention;
};

Status check(const SparseDecodeStepArgs& args);
Status workspace_size(const SparseDecodeStepArgs& args, size_t* bytes);
Status run(const SparseDecodeStepArgs& args, Workspace workspace, Stream stream);

}  // namespace msa
