// The layer-stack runner: per step it builds the batch metadata with the library's builder op,
// then for every layer synthesises the fused q/k/v/index rows, runs the fused pre-attention op
// (dense / sparse / skip-index mode), the indexer + top-k on layers that recompute it, and
// sparse or dense attention. There is no o_proj or MLP: each layer's attention output is
// digested per row, and the digests feed per-request checksums.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/device.h"
#include "engine/topk_stats.h"
#include "msa/config.h"
#include "msa/types.h"

namespace msa {
namespace engine {

struct RunnerOptions {
  ModelConfig model;                 // layer pattern, block size, top-k, reuse plan, RoPE, eps
  RankShape shape;                   // per-rank head counts
  DType kv_dtype = DType::kBF16;     // kBF16 or kE4M3 (per-layer scale)
  DType index_dtype = DType::kBF16;  // kBF16 or kE4M3 (no scale)
  Device device = Device::cpu();
  int threads = 0;  // CPU threads (0 = all)
  uint64_t seed = 0;
  int num_blocks = 0;              // pages per cache
  int max_batch_tokens = 0;        // rows per step
  int max_requests = 0;            // requests per step
  int max_blocks_per_request = 0;  // block-table width
  int64_t max_position = 0;        // RoPE table rows (> every position)
  bool dense_everywhere = false;   // baseline for --compare-dense: dense attention everywhere
  // Sets batch_invariant on every attention and index op, so that a request's outputs do not
  // depend on the other requests of its steps (on CUDA; the CPU backend always is invariant).
  bool batch_invariant = false;
  int fidelity_rows_per_step = 0;  // rows compared with host dense attention (0 = none)
  // Gathers TopkUnion from the top-k of every prefill index op (read back to the host: the
  // readback stage).
  bool topk_union = false;
};

// One request of a step: rows at positions [start, start + num_rows).
struct BatchRequest {
  int64_t id = 0;
  int64_t start = 0;
  int64_t num_rows = 0;
  const std::vector<int32_t>* kv_table = nullptr;
  const std::vector<int32_t>* index_table = nullptr;
};

struct Batch {
  int64_t step = 0;
  int num_decodes = 0;  // the first num_decodes requests, decode_query_len rows each
  int decode_query_len = 1;
  std::vector<BatchRequest> requests;
};

// Sparse vs exact dense attention for one (row, sparse layer), computed on the host in fp64.
struct FidelitySample {
  int layer = 0;
  int64_t position = 0;
  double rel_error = 0.0;      // ||o_sparse - o_dense|| / ||o_dense|| over the row's q heads
  double selected_mass = 0.0;  // dense softmax mass inside the selected blocks (mean over heads)
};

struct StepOutput {
  std::vector<uint64_t> digests;  // per row, every layer's output folded in
  StageTimes stages{};
  std::vector<FidelitySample> samples;
  TopkUnion topk_union;  // with RunnerOptions::topk_union
  // Attention and index op calls of the step with batch_invariant set, and without it.
  int invariant_op_calls = 0;
  int variant_op_calls = 0;
};

class ModelRunner {
 public:
  static Status create(const RunnerOptions& opts, std::unique_ptr<ModelRunner>* out);
  ~ModelRunner();

  Status execute(const Batch& batch, StepOutput* out);

  const std::vector<LayerKind>& plan() const { return plan_; }
  size_t device_bytes() const;
  // Bytes create() allocates for these options (device_bytes() right after create()); create()
  // refuses with kInvalidArgument, before allocating anything, a plan larger than the device.
  static Status plan_bytes(const RunnerOptions& opts, int64_t* bytes);

 private:
  struct Impl;
  explicit ModelRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::vector<LayerKind> plan_;
};

// Scale of layer l's fp8 K and V caches (stored = e4m3(x / scale)).
float kv_scale_for_layer(int layer);

}  // namespace engine
}  // namespace msa
