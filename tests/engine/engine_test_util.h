// A small model and engine setup shared by the engine tests: 4 layers (1 dense, 3 sparse),
// block size 16 and top-4 blocks, so that contexts of a few hundred tokens exercise sparsity.
#pragma once

#include <vector>

#include "engine/engine.h"
#include "engine/workload.h"
#include "msa/config.h"

namespace msa {
namespace engine {
namespace test {

inline ModelConfig small_model() {
  ModelConfig m;
  m.num_layers = 4;
  m.sparse_layers = {false, true, true, true};
  m.num_q_heads = 4;
  m.num_kv_heads = 1;
  m.sparse_num_index_heads = 1;
  m.head_dim = 64;
  m.sparse_index_dim = 64;
  m.rotary_dim = 32;
  m.sparse_block_size = 16;
  m.sparse_topk_blocks = 4;
  m.max_position_embeddings = 4096;
  return m;
}

inline EngineOptions small_engine(const std::vector<RequestSpec>& reqs, int threads = 2) {
  EngineOptions o;
  o.runner.model = small_model();
  rank_shape(o.runner.model, 1, &o.runner.shape);
  o.runner.threads = threads;
  o.runner.seed = 7;
  o.scheduler.block_size = o.runner.model.sparse_block_size;
  o.scheduler.max_batch_tokens = 256;
  o.scheduler.seed = 7;
  o.scheduler.num_blocks = default_pool_blocks(reqs, o.scheduler.block_size, 0);
  return o;
}

inline std::vector<RequestSpec> small_workload(int n, uint64_t seed = 3) {
  WorkloadOptions w;
  w.num_requests = n;
  w.prompt_min = 40;
  w.prompt_max = 200;
  w.output_min = 4;
  w.output_max = 24;
  w.seed = seed;
  std::vector<RequestSpec> reqs;
  generate_workload(w, &reqs);
  return reqs;
}

}  // namespace test
}  // namespace engine
}  // namespace msa
