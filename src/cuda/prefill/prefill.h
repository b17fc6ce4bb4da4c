// Host entry points of the tensor-core prefill kernels (sm_90a), called by the op launchers
// (src/cuda/index/launch.cu, src/cuda/attention/launch.cu, src/cuda/dense_attention.cu) when the
// call's shapes suit them (the *_supported functions, pure functions of shapes, dtypes, strides
// and the device).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/attention_problem.h"
#include "core/index_topk_problem.h"
#include "core/launch_policy.h"
#include "msa/attention.h"
#include "msa/types.h"

namespace msa {
namespace cuda {
namespace prefill {

// Whether the current device runs sm_90a code (compute capability 9.0).
bool device_is_sm90();

// The kernel choice MSA_CUDA_PREFILL asks for, read at every call (core/launch_policy.h).
detail::PrefillChoice prefill_choice();

// ---- Index scores ----

// Whether the tensor-core scorer serves this prefill problem: index head dim and block size 128,
// index_q and keys both bf16 or both e4m3, H_idx dividing 32, 16-byte aligned query rows, a
// cache TMA can read, and on average at least kIndexMinRowsPerRequest rows per request (a tile
// computes 128 rows; shorter requests waste most of it) unless the call is batch invariant.
constexpr int64_t kIndexMinRowsPerRequest = 32;
bool index_scores_supported(const detail::IndexTopkProblem& pb);
// Workspace of the per-call f16 copy of the e4m3 index keys (index_scores.cuh, kE4M3Copy): the
// reservation of detail::prefill_index_key_copy_requests for prefill calls with e4m3 queries and
// keys of head dim and block size 128, 0 for others.
size_t index_keys_copy_bytes(const detail::IndexTopkProblem& pb);
// Workspace of the scorer beside the block-maxima buffer: its tile plan, then the key copy.
size_t index_scores_workspace_bytes(const detail::IndexTopkProblem& pb);
// Writes the block maxima of every live prefill row into scores ([H, T, max_blocks]); `workspace`
// holds index_scores_workspace_bytes. The scorer's last kernel allows a dependent launch.
Status run_index_scores(const detail::IndexTopkProblem& pb, float* scores, void* workspace,
                        Stream stream);

// ---- Attention (dense causal and sparse) ----

using detail::AttentionProblem;  // the prefill and dense forms

// Whether the tensor-core attention serves this problem: head dim and block size 128, 8 or 16 q
// heads per KV head, q bf16 with a bf16 or e4m3 cache (e4m3: any scale mode) or q f16 with an
// f16 cache, out q's dtype or f32, TMA-readable 16-bit caches and 16-byte aligned q rows, top-k
// width * tokens per tile <= 256 (sparse), and on average at least kAttnMinRowsPerRequest rows per
// request (decode-like batches keep the split-KV kernels) unless the call is batch invariant.
constexpr int64_t kAttnMinRowsPerRequest = 8;
bool attention_supported(const AttentionProblem& pb);
// The tile plan and, for e4m3 calls that are not batch invariant, the per-call bf16 K/V copies
// (detail::prefill_kv_copy_pages; detail::prefill_kv_copied says which calls use them).
size_t attention_workspace_bytes(const AttentionProblem& pb);
Status run_attention(const AttentionProblem& pb, Workspace workspace, Stream stream);

}  // namespace prefill
}  // namespace cuda
}  // namespace msa
