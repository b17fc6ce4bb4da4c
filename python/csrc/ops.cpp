// The msa PyTorch operator library: TORCH_LIBRARY(msa) schemas (out variants with mutation
// annotations), CPU and CUDA kernels that forward to the framework-free msa API, and Python
// functions that size each op's workspace from tensor shapes.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <utility>

#include "glue.h"

namespace msa_torch {
namespace {

using OptTensor = std::optional<at::Tensor>;

msa::PreAttentionMode to_mode(int64_t mode) {
  TORCH_CHECK_VALUE(mode >= 0 && mode <= 2, "mode: " + std::to_string(mode) +
                                                ", expected 0 (dense), 1 (sparse) or 2 "
                                                "(skip_index)");
  return static_cast<msa::PreAttentionMode>(mode);
}

msa::IndexTopkParams topk_params(int64_t topk, int64_t init_blocks, int64_t local_blocks) {
  msa::IndexTopkParams p;
  p.topk = static_cast<int>(topk);
  p.init_blocks = static_cast<int>(init_blocks);
  p.local_blocks = static_cast<int>(local_blocks);
  return p;
}

// ---- fused_qknorm_rope --------------------------------------------------------------------

msa::FusedQkNormRopeArgs fused_qknorm_rope_args(
    const ViewFactory& view, const at::Tensor& qkv, const at::Tensor& positions,
    const at::Tensor& cos_sin_cache, const at::Tensor& q_norm_weight,
    const at::Tensor& k_norm_weight, const OptTensor& index_q_norm_weight,
    const OptTensor& index_k_norm_weight, const OptTensor& slot_mapping, const OptTensor& kv_cache,
    const OptTensor& k_scale, const OptTensor& v_scale, const OptTensor& index_slot_mapping,
    const OptTensor& index_cache, const OptTensor& q_out, const OptTensor& index_q_out,
    const OptTensor& error_flags, int64_t mode, int64_t num_q_heads, int64_t num_kv_heads,
    int64_t num_index_heads, int64_t rotary_dim, double eps) {
  msa::FusedQkNormRopeArgs a;
  a.mode = to_mode(mode);
  a.num_q_heads = static_cast<int>(num_q_heads);
  a.num_kv_heads = static_cast<int>(num_kv_heads);
  a.num_index_heads = static_cast<int>(num_index_heads);
  a.rotary_dim = static_cast<int>(rotary_dim);
  a.eps = static_cast<float>(eps);
  a.qkv = view(qkv, "qkv");
  a.positions = view(positions, "positions");
  a.cos_sin_cache = view(cos_sin_cache, "cos_sin_cache");
  a.q_norm_weight = view(q_norm_weight, "q_norm_weight");
  a.k_norm_weight = view(k_norm_weight, "k_norm_weight");
  a.index_q_norm_weight = view(index_q_norm_weight, "index_q_norm_weight");
  a.index_k_norm_weight = view(index_k_norm_weight, "index_k_norm_weight");
  a.slot_mapping = view(slot_mapping, "slot_mapping");
  if (kv_cache.has_value() && kv_cache->defined()) {
    a.kv_cache = view.kv_cache(*kv_cache, k_scale, v_scale, "kv_cache");
  }
  a.index_slot_mapping = view(index_slot_mapping, "index_slot_mapping");
  a.index_cache = view(index_cache, "index_cache");
  a.q_out = view(q_out, "q_out");
  a.index_q_out = view(index_q_out, "index_q_out");
  a.error_flags = view(error_flags, "error_flags");
  return a;
}

void fused_qknorm_rope(const at::Tensor& qkv, const at::Tensor& positions,
                       const at::Tensor& cos_sin_cache, const at::Tensor& q_norm_weight,
                       const at::Tensor& k_norm_weight, const OptTensor& index_q_norm_weight,
                       const OptTensor& index_k_norm_weight, const OptTensor& slot_mapping,
                       const OptTensor& kv_cache, const OptTensor& k_scale,
                       const OptTensor& v_scale, const OptTensor& index_slot_mapping,
                       const OptTensor& index_cache, const OptTensor& q_out,
                       const OptTensor& index_q_out, const OptTensor& error_flags,
                       const at::Tensor& workspace, int64_t mode, int64_t num_q_heads,
                       int64_t num_kv_heads, int64_t num_index_heads, int64_t rotary_dim,
                       double eps) {
  const c10::OptionalDeviceGuard guard(qkv.device());
  run_op("fused_qknorm_rope",
         fused_qknorm_rope_args(ViewFactory::real(), qkv, positions, cos_sin_cache, q_norm_weight,
                                k_norm_weight, index_q_norm_weight, index_k_norm_weight,
                                slot_mapping, kv_cache, k_scale, v_scale, index_slot_mapping,
                                index_cache, q_out, index_q_out, error_flags, mode, num_q_heads,
                                num_kv_heads, num_index_heads, rotary_dim, eps),
         workspace, qkv.device());
}

int64_t fused_qknorm_rope_workspace_size(
    const std::string& device, const at::Tensor& qkv, const at::Tensor& positions,
    const at::Tensor& cos_sin_cache, const at::Tensor& q_norm_weight,
    const at::Tensor& k_norm_weight, const OptTensor& index_q_norm_weight,
    const OptTensor& index_k_norm_weight, const OptTensor& slot_mapping, const OptTensor& kv_cache,
    const OptTensor& k_scale, const OptTensor& v_scale, const OptTensor& index_slot_mapping,
    const OptTensor& index_cache, const OptTensor& q_out, const OptTensor& index_q_out,
    const OptTensor& error_flags, int64_t mode, int64_t num_q_heads, int64_t num_kv_heads,
    int64_t num_index_heads, int64_t rotary_dim, double eps) {
  const auto view = ViewFactory::shape_only(to_msa_device(c10::Device(device)));
  return query_workspace_size(
      "fused_qknorm_rope",
      fused_qknorm_rope_args(view, qkv, positions, cos_sin_cache, q_norm_weight, k_norm_weight,
                             index_q_norm_weight, index_k_norm_weight, slot_mapping, kv_cache,
                             k_scale, v_scale, index_slot_mapping, index_cache, q_out, index_q_out,
                             error_flags, mode, num_q_heads, num_kv_heads, num_index_heads,
                             rotary_dim, eps));
}

// ---- rope_cache ---------------------------------------------------------------------------

msa::RopeCacheArgs rope_cache_args(const ViewFactory& view, const at::Tensor& cos_sin_out,
                                   double theta) {
  msa::RopeCacheArgs a;
  a.theta = theta;
  a.cos_sin_out = view(cos_sin_out, "cos_sin_out");
  return a;
}

void rope_cache(const at::Tensor& cos_sin_out, const at::Tensor& workspace, double theta) {
  const c10::OptionalDeviceGuard guard(cos_sin_out.device());
  run_op("rope_cache", rope_cache_args(ViewFactory::real(), cos_sin_out, theta), workspace,
         cos_sin_out.device());
}

int64_t rope_cache_workspace_size(const std::string& device, const at::Tensor& cos_sin_out,
                                  double theta) {
  const auto view = ViewFactory::shape_only(to_msa_device(c10::Device(device)));
  return query_workspace_size("rope_cache", rope_cache_args(view, cos_sin_out, theta));
}

// ---- index_topk_decode / index_topk_prefill -------------------------------------------------

msa::IndexTopkDecodeArgs index_topk_decode_args(
    const ViewFactory& view, const at::Tensor& index_q, const at::Tensor& index_cache,
    const at::Tensor& block_table, const at::Tensor& seq_lens, const at::Tensor& topk_out,
    const OptTensor& error_flags, int64_t query_len, int64_t topk, int64_t init_blocks,
    int64_t local_blocks) {
  msa::IndexTopkDecodeArgs a;
  a.params = topk_params(topk, init_blocks, local_blocks);
  a.query_len = static_cast<int>(query_len);
  a.index_q = view(index_q, "index_q");
  a.index_cache = view(index_cache, "index_cache");
  a.block_table = view(block_table, "block_table");
  a.seq_lens = view(seq_lens, "seq_lens");
  a.topk_out = view(topk_out, "topk_out");
  a.error_flags = view(error_flags, "error_flags");
  return a;
}

void index_topk_decode(const at::Tensor& index_q, const at::Tensor& index_cache,
                       const at::Tensor& block_table, const at::Tensor& seq_lens,
                       const at::Tensor& topk_out, const OptTensor& error_flags,
                       const at::Tensor& workspace, int64_t query_len, int64_t topk,
                       int64_t init_blocks, int64_t local_blocks) {
  const c10::OptionalDeviceGuard guard(index_q.device());
  run_op("index_topk_decode",
         index_topk_decode_args(ViewFactory::real(), index_q, index_cache, block_table, seq_lens,
                                topk_out, error_flags, query_len, topk, init_blocks, local_blocks),
         workspace, index_q.device());
}

int64_t index_topk_decode_workspace_size(const std::string& device, const at::Tensor& index_q,
                                         const at::Tensor& index_cache,
                                         const at::Tensor& block_table, const at::Tensor& seq_lens,
                                         const at::Tensor& topk_out, const OptTensor& error_flags,
                                         int64_t query_len, int64_t topk, int64_t init_blocks,
                                         int64_t local_blocks) {
  const auto view = ViewFactory::shape_only(to_msa_device(c10::Device(device)));
  return query_workspace_size(
      "index_topk_decode",
      index_topk_decode_args(view, index_q, index_cache, block_table, seq_lens, topk_out,
                             error_flags, query_len, topk, init_blocks, local_blocks));
}

msa::IndexTopkPrefillArgs index_topk_prefill_args(
    const ViewFactory& view, const at::Tensor& index_q, const at::Tensor& index_cache,
    const at::Tensor& block_table, const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens,
    const at::Tensor& topk_out, const OptTensor& error_flags, int64_t topk, int64_t init_blocks,
    int64_t local_blocks) {
  msa::IndexTopkPrefillArgs a;
  a.params = topk_params(topk, init_blocks, local_blocks);
  a.index_q = view(index_q, "index_q");
  a.index_cache = view(index_cache, "index_cache");
  a.block_table = view(block_table, "block_table");
  a.cu_seqlens_q = view(cu_seqlens_q, "cu_seqlens_q");
  a.seq_lens = view(seq_lens, "seq_lens");
  a.topk_out = view(topk_out, "topk_out");
  a.error_flags = view(error_flags, "error_flags");
  return a;
}

void index_topk_prefill(const at::Tensor& index_q, const at::Tensor& index_cache,
                        const at::Tensor& block_table, const at::Tensor& cu_seqlens_q,
                        const at::Tensor& seq_lens, const at::Tensor& topk_out,
                        const OptTensor& error_flags, const at::Tensor& workspace, int64_t topk,
                        int64_t init_blocks, int64_t local_blocks) {
  const c10::OptionalDeviceGuard guard(index_q.device());
  run_op(
      "index_topk_prefill",
      index_topk_prefill_args(ViewFactory::real(), index_q, index_cache, block_table, cu_seqlens_q,
                              seq_lens, topk_out, error_flags, topk, init_blocks, local_blocks),
      workspace, index_q.device());
}

int64_t index_topk_prefill_workspace_size(const std::string& device, const at::Tensor& index_q,
                                          const at::Tensor& index_cache,
                                          const at::Tensor& block_table,
                                          const at::Tensor& cu_seqlens_q,
                                          const at::Tensor& seq_lens, const at::Tensor& topk_out,
                                          const OptTensor& error_flags, int64_t topk,
                                          int64_t init_blocks, int64_t local_blocks) {
  const auto view = ViewFactory::shape_only(to_msa_device(c10::Device(device)));
  return query_workspace_size(
      "index_topk_prefill",
      index_topk_prefill_args(view, index_q, index_cache, block_table, cu_seqlens_q, seq_lens,
                              topk_out, error_flags, topk, init_blocks, local_blocks));
}

// ---- sparse_page16 ------------------------------------------------------------------------

msa::SparsePage16Args sparse_page16_args(const ViewFactory& view, const at::Tensor& topk,
                                         const at::Tensor& block_table, const at::Tensor& seq_lens,
                                         const at::Tensor& table_out,
                                         const at::Tensor& context_lens_out,
                                         const OptTensor& error_flags, int64_t query_len,
                                         int64_t page_stride, int64_t block_size) {
  msa::SparsePage16Args a;
  a.query_len = static_cast<int>(query_len);
  a.page_stride = static_cast<int>(page_stride);
  a.block_size = static_cast<int>(block_size);
  a.topk = view(topk, "topk");
  a.block_table = view(block_table, "block_table");
  a.seq_lens = view(seq_lens, "seq_lens");
  a.table_out = view(table_out, "table_out");
  a.context_lens_out = view(context_lens_out, "context_lens_out");
  a.error_flags = view(error_flags, "error_flags");
  return a;
}

void sparse_page16(const at::Tensor& topk, const at::Tensor& block_table,
                   const at::Tensor& seq_lens, const at::Tensor& table_out,
                   const at::Tensor& context_lens_out, const OptTensor& error_flags,
                   const at::Tensor& workspace, int64_t query_len, int64_t page_stride,
                   int64_t block_size) {
  const c10::OptionalDeviceGuard guard(topk.device());
  run_op("sparse_page16",
         sparse_page16_args(ViewFactory::real(), topk, block_table, seq_lens, table_out,
                            context_lens_out, error_flags, query_len, page_stride, block_size),
         workspace, topk.device());
}

int64_t sparse_page16_workspace_size(const std::string& device, const at::Tensor& topk,
                                     const at::Tensor& block_table, const at::Tensor& seq_lens,
                                     const at::Tensor& table_out,
                                     const at::Tensor& context_lens_out,
                                     const OptTensor& error_flags, int64_t query_len,
                                     int64_t page_stride, int64_t block_size) {
  const auto view = ViewFactory::shape_only(to_msa_device(c10::Device(device)));
  return query_workspace_size(
      "sparse_page16",
      sparse_page16_args(view, topk, block_table, seq_lens, table_out, context_lens_out,
                         error_flags, query_len, page_stride, block_size));
}

// ---- sparse_attention_decode / sparse_attention_prefill / dense_attention ------------------

msa::SparseAttentionDecodeArgs sparse_attention_decode_args(
    const ViewFactory& view, const at::Tensor& q, const at::Tensor& kv_cache,
    const OptTensor& k_scale, const OptTensor& v_scale, const at::Tensor& block_table,
    const at::Tensor& seq_lens, const at::Tensor& topk, const at::Tensor& out, const OptTensor& lse,
    const OptTensor& error_flags, int64_t query_len, double softmax_scale) {
  msa::SparseAttentionDecodeArgs a;
  a.query_len = static_cast<int>(query_len);
  a.softmax_scale = static_cast<float>(softmax_scale);
  a.q = view(q, "q");
  a.kv_cache = view.kv_cache(kv_cache, k_scale, v_scale, "kv_cache");
  a.block_table = view(block_table, "block_table");
  a.seq_lens = view(seq_lens, "seq_lens");
  a.topk = view(topk, "topk");
  a.out = view(out, "out");
  a.lse = view(lse, "lse");
  a.error_flags = view(error_flags, "error_flags");
  return a;
}

void sparse_attention_decode(const at::Tensor& q, const at::Tensor& kv_cache,
                             const OptTensor& k_scale, const OptTensor& v_scale,
                             const at::Tensor& block_table, const at::Tensor& seq_lens,
                             const at::Tensor& topk, const at::Tensor& out, const OptTensor& lse,
                             const OptTensor& error_flags, const at::Tensor& workspace,
                             int64_t query_len, double softmax_scale) {
  const c10::OptionalDeviceGuard guard(q.device());
  run_op(
      "sparse_attention_decode",
      sparse_attention_decode_args(ViewFactory::real(), q, kv_cache, k_scale, v_scale, block_table,
                                   seq_lens, topk, out, lse, error_flags, query_len, softmax_scale),
      workspace, q.device());
}

int64_t sparse_attention_decode_workspace_size(
    const std::string& device, const at::Tensor& q, const at::Tensor& kv_cache,
    const OptTensor& k_scale, const OptTensor& v_scale, const at::Tensor& block_table,
    const at::Tensor& seq_lens, const at::Tensor& topk, const at::Tensor& out, const OptTensor& lse,
    const OptTensor& error_flags, int64_t query_len, double softmax_scale) {
  const auto view = ViewFactory::shape_only(to_msa_device(c10::Device(device)));
  return query_workspace_size(
      "sparse_attention_decode",
      sparse_attention_decode_args(view, q, kv_cache, k_scale, v_scale, block_table, seq_lens, topk,
                                   out, lse, error_flags, query_len, softmax_scale));
}

msa::SparseAttentionPrefillArgs sparse_attention_prefill_args(
    const ViewFactory& view, const at::Tensor& q, const at::Tensor& kv_cache,
    const OptTensor& k_scale, const OptTensor& v_scale, const at::Tensor& block_table,
    const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens, const at::Tensor& topk,
    const at::Tensor& out, const OptTensor& lse, const OptTensor& error_flags,
    double softmax_scale) {
  msa::SparseAttentionPrefillArgs a;
  a.softmax_scale = static_cast<float>(softmax_scale);
  a.q = view(q, "q");
  a.kv_cache = view.kv_cache(kv_cache, k_scale, v_scale, "kv_cache");
  a.block_table = view(block_table, "block_table");
  a.cu_seqlens_q = view(cu_seqlens_q, "cu_seqlens_q");
  a.seq_lens = view(seq_lens, "seq_lens");
  a.topk = view(topk, "topk");
  a.out = view(out, "out");
  a.lse = view(lse, "lse");
  a.error_flags = view(error_flags, "error_flags");
  return a;
}

void sparse_attention_prefill(const at::Tensor& q, const at::Tensor& kv_cache,
                              const OptTensor& k_scale, const OptTensor& v_scale,
                              const at::Tensor& block_table, const at::Tensor& cu_seqlens_q,
                              const at::Tensor& seq_lens, const at::Tensor& topk,
                              const at::Tensor& out, const OptTensor& lse,
                              const OptTensor& error_flags, const at::Tensor& workspace,
                              double softmax_scale) {
  const c10::OptionalDeviceGuard guard(q.device());
  run_op("sparse_attention_prefill",
         sparse_attention_prefill_args(ViewFactory::real(), q, kv_cache, k_scale, v_scale,
                                       block_table, cu_seqlens_q, seq_lens, topk, out, lse,
                                       error_flags, softmax_scale),
         workspace, q.device());
}

int64_t sparse_attention_prefill_workspace_size(
    const std::string& device, const at::Tensor& q, const at::Tensor& kv_cache,
    const OptTensor& k_scale, const OptTensor& v_scale, const at::Tensor& block_table,
    const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens, const at::Tensor& topk,
    const at::Tensor& out, const OptTensor& lse, const OptTensor& error_flags,
    double softmax_scale) {
  const auto view = ViewFactory::shape_only(to_msa_device(c10::Device(device)));
  return query_workspace_size(
      "sparse_attention_prefill",
      sparse_attention_prefill_args(view, q, kv_cache, k_scale, v_scale, block_table, cu_seqlens_q,
                                    seq_lens, topk, out, lse, error_flags, softmax_scale));
}

msa::DenseAttentionArgs dense_attention_args(
    const ViewFactory& view, const at::Tensor& q, const at::Tensor& kv_cache,
    const OptTensor& k_scale, const OptTensor& v_scale, const at::Tensor& block_table,
    const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens, const at::Tensor& out,
    const OptTensor& lse, const OptTensor& error_flags, double softmax_scale) {
  msa::DenseAttentionArgs a;
  a.softmax_scale = static_cast<float>(softmax_scale);
  a.q = view(q, "q");
  a.kv_cache = view.kv_cache(kv_cache, k_scale, v_scale, "kv_cache");
  a.block_table = view(block_table, "block_table");
  a.cu_seqlens_q = view(cu_seqlens_q, "cu_seqlens_q");
  a.seq_lens = view(seq_lens, "seq_lens");
  a.out = view(out, "out");
  a.lse = view(lse, "lse");
  a.error_flags = view(error_flags, "error_flags");
  return a;
}

void dense_attention(const at::Tensor& q, const at::Tensor& kv_cache, const OptTensor& k_scale,
                     const OptTensor& v_scale, const at::Tensor& block_table,
                     const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens,
                     const at::Tensor& out, const OptTensor& lse, const OptTensor& error_flags,
                     const at::Tensor& workspace, double softmax_scale) {
  const c10::OptionalDeviceGuard guard(q.device());
  run_op("dense_attention",
         dense_attention_args(ViewFactory::real(), q, kv_cache, k_scale, v_scale, block_table,
                              cu_seqlens_q, seq_lens, out, lse, error_flags, softmax_scale),
         workspace, q.device());
}

int64_t dense_attention_workspace_size(const std::string& device, const at::Tensor& q,
                                       const at::Tensor& kv_cache, const OptTensor& k_scale,
                                       const OptTensor& v_scale, const at::Tensor& block_table,
                                       const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens,
                                       const at::Tensor& out, const OptTensor& lse,
                                       const OptTensor& error_flags, double softmax_scale) {
  const auto view = ViewFactory::shape_only(to_msa_device(c10::Device(device)));
  return query_workspace_size(
      "dense_attention",
      dense_attention_args(view, q, kv_cache, k_scale, v_scale, block_table, cu_seqlens_q, seq_lens,
                           out, lse, error_flags, softmax_scale));
}

// ---- batch_metadata -----------------------------------------------------------------------

msa::BatchMetadataArgs batch_metadata_args(
    const ViewFactory& view, const at::Tensor& query_lens, const at::Tensor& seq_lens,
    const at::Tensor& block_table, const OptTensor& index_block_table,
    const OptTensor& query_start_loc, const OptTensor& prefill_cu_seqlens_q,
    const OptTensor& prefill_cu_seqlens_k, const OptTensor& context_lens,
    const OptTensor& kv_block_counts, const OptTensor& token_request,
    const OptTensor& token_position, const OptTensor& slot_mapping,
    const OptTensor& index_slot_mapping, const OptTensor& totals, const OptTensor& error_flags,
    int64_t num_decode_requests, int64_t decode_query_len, int64_t block_size) {
  msa::BatchMetadataArgs a;
  a.num_decode_requests = static_cast<int>(num_decode_requests);
  a.decode_query_len = static_cast<int>(decode_query_len);
  a.block_size = static_cast<int>(block_size);
  a.query_lens = view(query_lens, "query_lens");
  a.seq_lens = view(seq_lens, "seq_lens");
  a.block_table = view(block_table, "block_table");
  a.index_block_table = view(index_block_table, "index_block_table");
  a.query_start_loc = view(query_start_loc, "query_start_loc");
  a.prefill_cu_seqlens_q = view(prefill_cu_seqlens_q, "prefill_cu_seqlens_q");
  a.prefill_cu_seqlens_k = view(prefill_cu_seqlens_k, "prefill_cu_seqlens_k");
  a.context_lens = view(context_lens, "context_lens");
  a.kv_block_counts = view(kv_block_counts, "kv_block_counts");
  a.token_request = view(token_request, "token_request");
  a.token_position = view(token_position, "token_position");
  a.slot_mapping = view(slot_mapping, "slot_mapping");
  a.index_slot_mapping = view(index_slot_mapping, "index_slot_mapping");
  a.totals = view(totals, "totals");
  a.error_flags = view(error_flags, "error_flags");
  return a;
}

void batch_metadata(const at::Tensor& query_lens, const at::Tensor& seq_lens,
                    const at::Tensor& block_table, const OptTensor& index_block_table,
                    const OptTensor& query_start_loc, const OptTensor& prefill_cu_seqlens_q,
                    const OptTensor& prefill_cu_seqlens_k, const OptTensor& context_lens,
                    const OptTensor& kv_block_counts, const OptTensor& token_request,
                    const OptTensor& token_position, const OptTensor& slot_mapping,
                    const OptTensor& index_slot_mapping, const OptTensor& totals,
                    const OptTensor& error_flags, const at::Tensor& workspace,
                    int64_t num_decode_requests, int64_t decode_query_len, int64_t block_size) {
  const c10::OptionalDeviceGuard guard(query_lens.device());
  run_op("batch_metadata",
         batch_metadata_args(ViewFactory::real(), query_lens, seq_lens, block_table,
                             index_block_table, query_start_loc, prefill_cu_seqlens_q,
                             prefill_cu_seqlens_k, context_lens, kv_block_counts, token_request,
                             token_position, slot_mapping, index_slot_mapping, totals, error_flags,
                             num_decode_requests, decode_query_len, block_size),
         workspace, query_lens.device());
}

int64_t batch_metadata_workspace_size(
    const std::string& device, const at::Tensor& query_lens, const at::Tensor& seq_lens,
    const at::Tensor& block_table, const OptTensor& index_block_table,
    const OptTensor& query_start_loc, const OptTensor& prefill_cu_seqlens_q,
    const OptTensor& prefill_cu_seqlens_k, const OptTensor& context_lens,
    const OptTensor& kv_block_counts, const OptTensor& token_request,
    const OptTensor& token_position, const OptTensor& slot_mapping,
    const OptTensor& index_slot_mapping, const OptTensor& totals, const OptTensor& error_flags,
    int64_t num_decode_requests, int64_t decode_query_len, int64_t block_size) {
  const auto view = ViewFactory::shape_only(to_msa_device(c10::Device(device)));
  return query_workspace_size(
      "batch_metadata",
      batch_metadata_args(view, query_lens, seq_lens, block_table, index_block_table,
                          query_start_loc, prefill_cu_seqlens_q, prefill_cu_seqlens_k, context_lens,
                          kv_block_counts, token_request, token_position, slot_mapping,
                          index_slot_mapping, totals, error_flags, num_decode_requests,
                          decode_query_len, block_size));
}

}  // namespace
}  // namespace msa_torch

// Schemas: every op is an out variant returning nothing; each tensor it writes carries its own
// alias set with "!" (the workspace included, as scratch). Keep the argument order in sync with
// the Python wrappers in msa/_ops.py.
TORCH_LIBRARY(msa, m) {
  m.def(
      "fused_qknorm_rope(Tensor(a!) qkv, Tensor positions, Tensor cos_sin_cache, "
      "Tensor q_norm_weight, Tensor k_norm_weight, Tensor? index_q_norm_weight, "
      "Tensor? index_k_norm_weight, Tensor? slot_mapping, Tensor(b!)? kv_cache, "
      "Tensor? k_scale, Tensor? v_scale, Tensor? index_slot_mapping, Tensor(c!)? index_cache, "
      "Tensor(d!)? q_out, Tensor(e!)? index_q_out, Tensor(f!)? error_flags, "
      "Tensor(g!) workspace, int pre_attention_mode, int num_q_heads, int num_kv_heads, int "
      "num_index_heads, "
      "int rotary_dim, float eps) -> ()");
  m.def("rope_cache(Tensor(a!) cos_sin_out, Tensor(b!) workspace, float theta) -> ()");
  m.def(
      "index_topk_decode(Tensor index_q, Tensor index_cache, Tensor block_table, "
      "Tensor seq_lens, Tensor(a!) topk_out, Tensor(b!)? error_flags, Tensor(c!) workspace, "
      "int query_len, int topk, int init_blocks, int local_blocks) -> ()");
  m.def(
      "index_topk_prefill(Tensor index_q, Tensor index_cache, Tensor block_table, "
      "Tensor cu_seqlens_q, Tensor seq_lens, Tensor(a!) topk_out, Tensor(b!)? error_flags, "
      "Tensor(c!) workspace, int topk, int init_blocks, int local_blocks) -> ()");
  m.def(
      "sparse_page16(Tensor topk, Tensor block_table, Tensor seq_lens, Tensor(a!) table_out, "
      "Tensor(b!) context_lens_out, Tensor(c!)? error_flags, Tensor(d!) workspace, "
      "int query_len, int page_stride, int block_size) -> ()");
  m.def(
      "sparse_attention_decode(Tensor q, Tensor kv_cache, Tensor? k_scale, Tensor? v_scale, "
      "Tensor block_table, Tensor seq_lens, Tensor topk, Tensor(a!) out, Tensor(b!)? lse, "
      "Tensor(c!)? error_flags, Tensor(d!) workspace, int query_len, float softmax_scale) -> ()");
  m.def(
      "sparse_attention_prefill(Tensor q, Tensor kv_cache, Tensor? k_scale, Tensor? v_scale, "
      "Tensor block_table, Tensor cu_seqlens_q, Tensor seq_lens, Tensor topk, Tensor(a!) out, "
      "Tensor(b!)? lse, Tensor(c!)? error_flags, Tensor(d!) workspace, float softmax_scale) "
      "-> ()");
  m.def(
      "dense_attention(Tensor q, Tensor kv_cache, Tensor? k_scale, Tensor? v_scale, "
      "Tensor block_table, Tensor cu_seqlens_q, Tensor seq_lens, Tensor(a!) out, "
      "Tensor(b!)? lse, Tensor(c!)? error_flags, Tensor(d!) workspace, float softmax_scale) "
      "-> ()");
  m.def(
      "batch_metadata(Tensor query_lens, Tensor seq_lens, Tensor block_table, "
      "Tensor? index_block_table, Tensor(a!)? query_start_loc, "
      "Tensor(b!)? prefill_cu_seqlens_q, Tensor(c!)? prefill_cu_seqlens_k, "
      "Tensor(d!)? context_lens, Tensor(e!)? kv_block_counts, Tensor(f!)? token_request, "
      "Tensor(g!)? token_position, Tensor(h!)? slot_mapping, Tensor(i!)? index_slot_mapping, "
      "Tensor(j!)? totals, Tensor(k!)? error_flags, Tensor(l!) workspace, "
      "int num_decode_requests, int decode_query_len, int block_size) -> ()");
}

// One kernel per op serves both devices: msa dispatches on the tensors' device itself.
#define MSA_REGISTER_KERNELS(m)                                             \
  m.impl("fused_qknorm_rope", &msa_torch::fused_qknorm_rope);               \
  m.impl("rope_cache", &msa_torch::rope_cache);                             \
  m.impl("index_topk_decode", &msa_torch::index_topk_decode);               \
  m.impl("index_topk_prefill", &msa_torch::index_topk_prefill);             \
  m.impl("sparse_page16", &msa_torch::sparse_page16);                       \
  m.impl("sparse_attention_decode", &msa_torch::sparse_attention_decode);   \
  m.impl("sparse_attention_prefill", &msa_torch::sparse_attention_prefill); \
  m.impl("dense_attention", &msa_torch::dense_attention);                   \
  m.impl("batch_metadata", &msa_torch::batch_metadata)

TORCH_LIBRARY_IMPL(msa, CPU, m) { MSA_REGISTER_KERNELS(m); }

TORCH_LIBRARY_IMPL(msa, CUDA, m) { MSA_REGISTER_KERNELS(m); }

#undef MSA_REGISTER_KERNELS

namespace {

// The workspace-size functions are plain pybind11 functions, outside the dispatcher. They report
// errors by value, (kind, message, bytes) with kind "" on success, and the Python side raises:
// no C++ exception crosses the pybind11 boundary, so error handling does not depend on
// exception translators shared with torch's own pybind11 module.
template <typename... Args>
auto size_by_value(int64_t (*fn)(Args...)) {
  return [fn](Args... args) -> pybind11::tuple {
    try {
      return pybind11::make_tuple("", "", fn(std::forward<Args>(args)...));
    } catch (const c10::ValueError& e) {
      return pybind11::make_tuple("value", e.what_without_backtrace(), 0);
    } catch (const c10::IndexError& e) {
      return pybind11::make_tuple("index", e.what_without_backtrace(), 0);
    } catch (const c10::NotImplementedError& e) {
      return pybind11::make_tuple("not_implemented", e.what_without_backtrace(), 0);
    } catch (const c10::Error& e) {
      return pybind11::make_tuple("runtime", e.what_without_backtrace(), 0);
    } catch (const std::exception& e) {
      return pybind11::make_tuple("runtime", e.what(), 0);
    }
  };
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "msa PyTorch extension: registers torch.ops.msa.* and sizes op workspaces";
  m.def("version", &msa::version_string, "Version of the linked msa library");
  m.def("built_with_cuda", &msa::built_with_cuda,
        "True when the linked msa library has its CUDA backend");
  m.def("fused_qknorm_rope_workspace_size",
        size_by_value(&msa_torch::fused_qknorm_rope_workspace_size));
  m.def("rope_cache_workspace_size", size_by_value(&msa_torch::rope_cache_workspace_size));
  m.def("index_topk_decode_workspace_size",
        size_by_value(&msa_torch::index_topk_decode_workspace_size));
  m.def("index_topk_prefill_workspace_size",
        size_by_value(&msa_torch::index_topk_prefill_workspace_size));
  m.def("sparse_page16_workspace_size", size_by_value(&msa_torch::sparse_page16_workspace_size));
  m.def("sparse_attention_decode_workspace_size",
        size_by_value(&msa_torch::sparse_attention_decode_workspace_size));
  m.def("sparse_attention_prefill_workspace_size",
        size_by_value(&msa_torch::sparse_attention_prefill_workspace_size));
  m.def("dense_attention_workspace_size",
        size_by_value(&msa_torch::dense_attention_workspace_size));
  m.def("batch_metadata_workspace_size", size_by_value(&msa_torch::batch_metadata_workspace_size));
}
