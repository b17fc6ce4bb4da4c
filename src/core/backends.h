// The backend interface: every op's public run() validates with check() and then calls the
// implementation for the tensors' device here. Each backend defines workspace_size and run for
// every Args type; a combination a backend cannot serve returns kNotSupported from its run.
#pragma once

#include "msa/attention.h"
#include "msa/decode_step.h"
#include "msa/fused_qknorm_rope.h"
#include "msa/indexer.h"
#include "msa/metadata.h"

namespace msa {

#define MSA_DECLARE_BACKEND_OP(ArgsType)                      \
  Status workspace_size(const ArgsType& args, size_t* bytes); \
  Status run(const ArgsType& args, Workspace workspace, Stream stream);

#define MSA_DECLARE_BACKEND_OPS                      \
  MSA_DECLARE_BACKEND_OP(FusedQkNormRopeArgs)        \
  MSA_DECLARE_BACKEND_OP(RopeCacheArgs)              \
  MSA_DECLARE_BACKEND_OP(IndexTopkDecodeArgs)        \
  MSA_DECLARE_BACKEND_OP(IndexTopkPrefillArgs)       \
  MSA_DECLARE_BACKEND_OP(SparsePage16Args)           \
  MSA_DECLARE_BACKEND_OP(SparseAttentionDecodeArgs)  \
  MSA_DECLARE_BACKEND_OP(SparseAttentionPrefillArgs) \
  MSA_DECLARE_BACKEND_OP(DenseAttentionArgs)         \
  MSA_DECLARE_BACKEND_OP(SparseDecodeStepArgs)       \
  MSA_DECLARE_BACKEND_OP(BatchMetadataArgs)

namespace cpu {
MSA_DECLARE_BACKEND_OPS
}  // namespace cpu

#if MSA_WITH_CUDA
namespace cuda {
MSA_DECLARE_BACKEND_OPS
}  // namespace cuda
#endif

#undef MSA_DECLARE_BACKEND_OPS
#undef MSA_DECLARE_BACKEND_OP

}  // namespace msa
