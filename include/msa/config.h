// Model configuration: the MiniMax-M3 preset, tensor-parallel rank shapes, loading from a
// Hugging Face config.json, and the cross-layer top-k reuse plan (spec A1, A9, B1).
#pragma once

#include <string>
#include <vector>

#include "msa/types.h"

namespace msa {

struct ModelConfig {
  int hidden_size = 6144;
  int num_layers = 60;
  int num_q_heads = 64;
  int num_kv_heads = 4;
  int head_dim = 128;
  int rotary_dim = 64;  // partial NeoX RoPE on dims [0, rotary_dim)
  double rope_theta = 5e6;
  int max_position_embeddings = 524288;
  double rms_norm_eps = 1e-6;
  double softmax_scale = 0.0;  // 0 = head_dim^-0.5

  // Sparse attention (MSA).
  int sparse_block_size = 128;  // = KV page size
  int sparse_topk_blocks = 16;
  int sparse_num_index_heads = 4;  // one per KV head
  int sparse_index_dim = 128;
  int sparse_init_blocks = 0;   // forced leading blocks
  int sparse_local_blocks = 1;  // forced trailing blocks (the query's own block)
  // Per layer: true = sparse (MSA), false = dense causal GQA. Empty = MiniMax-M3 pattern
  // (first 3 dense, the rest sparse) over num_layers.
  std::vector<bool> sparse_layers;

  // Cross-layer top-k reuse (spec A9).
  bool use_index_cache = false;
  int index_topk_freq = 1;
  int index_skip_topk_offset = 0;

  // The MiniMax-M3 text backbone as released (identical to the default member values).
  static ModelConfig minimax_m3();

  float effective_softmax_scale() const;
  bool is_sparse_layer(int layer) const;
  // Checks ranges and consistency (heads divide, index heads == kv heads, ...).
  Status validate() const;
};

// Loads `text_config` (or the top level when there is none) of a Hugging Face config.json.
// Keys: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
// rotary_dim or partial_rotary_factor, rope_theta, max_position_embeddings, rms_norm_eps,
// sparse_block_size, sparse_topk_blocks, sparse_num_index_heads, sparse_index_dim,
// sparse_init_block, sparse_local_block, sparse_attention_freq (list of 0/1 per layer),
// use_index_cache, index_topk_freq, index_skip_topk_offset. Absent keys keep the M3 defaults.
Status parse_hf_config(const std::string& json_text, ModelConfig* out);
Status load_hf_config(const std::string& path, ModelConfig* out);

// Per-rank head counts under tensor parallelism (spec B1): q heads split, KV heads split while
// tp <= num_kv_heads and replicated beyond, index-q heads shard like KV heads, the index key
// is replicated.
struct RankShape {
  int tp_size = 1;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int num_index_heads = 0;
  int group_size = 0;  // q heads per KV head on this rank
  int head_dim = 0;
  int index_dim = 0;
  int fused_row_width = 0;  // (nq + 2 nkv + niq + 1) * head_dim elements per token
};

// tp_size must divide num_q_heads, and either divide num_kv_heads or be a multiple of it.
Status rank_shape(const ModelConfig& cfg, int tp_size, RankShape* out);

// What one layer does in a forward pass (spec A9).
enum class LayerKind {
  kDense,          // dense causal GQA
  kSparseCompute,  // sparse, recomputes the top-k (index branch on)
  kSparseReuse,    // sparse, reuses the shared top-k buffer (index branch skipped)
};

// One entry per layer. Sparse ordinal o recomputes iff !use_index_cache or
// max(o - offset, 0) % freq == 0.
Status plan_topk_reuse(const ModelConfig& cfg, std::vector<LayerKind>* out);

}  // namespace msa
