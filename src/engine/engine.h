// The serving loop: arrivals, scheduling, one runner step per batch, and the bookkeeping that
// the summary and the report are made from.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/runner.h"
#include "engine/scheduler.h"
#include "engine/workload.h"

namespace msa {
namespace engine {

struct EngineOptions {
  RunnerOptions runner;  // workload-dependent capacities are filled in by run_engine
  SchedulerOptions scheduler;
};

struct StepRecord {
  int64_t step = 0;
  double start_s = 0.0;  // on the run's clock
  int64_t tokens = 0;
  int decode_requests = 0;
  int prefill_requests = 0;
  int64_t decode_tokens = 0;
  int64_t prefill_tokens = 0;
  int64_t output_tokens = 0;  // tokens the step added to the outputs (accepted drafts included)
  int64_t max_context = 0;    // largest sequence length in the batch after the step
  double latency_ms = 0.0;
  StageTimes stages{};
  int kv_blocks_used = 0;
};

struct RequestResult {
  int64_t id = 0;
  double arrival_s = 0.0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int preemptions = 0;
  int64_t recomputed_tokens = 0;
  double ttft_s = 0.0;     // first token time minus arrival
  double latency_s = 0.0;  // finish time minus arrival
  uint64_t checksum = 0;   // over every position's attention outputs in every layer
};

struct RunResult {
  std::vector<StepRecord> steps;
  std::vector<RequestResult> requests;  // in id order
  std::vector<FidelitySample> samples;
  std::vector<LayerKind> plan;
  double wall_s = 0.0;  // run clock at the end (idle gaps before arrivals skipped)
  double busy_s = 0.0;  // sum of step latencies
  double idle_skipped_s = 0.0;
  int64_t preemptions = 0;
  int64_t recomputed_tokens = 0;
  int64_t draft_proposed = 0;
  int64_t draft_accepted = 0;
  int pool_blocks = 0;
  int peak_kv_blocks = 0;
  int peak_index_blocks = 0;
  int blocks_in_use_at_end = 0;
  size_t device_bytes = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int64_t processed_tokens = 0;  // rows computed, recomputation and drafts included
  // Attention and index op calls with batch_invariant set, and without it: all of one kind,
  // as RunnerOptions::batch_invariant says.
  int64_t invariant_op_calls = 0;
  int64_t variant_op_calls = 0;
  TopkUnion topk_union;  // with RunnerOptions::topk_union
};

// After every step. Prompt tokens count as progress too, so that a long prefill moves it:
// prompt_tokens is the sum over requests of the prompt tokens in the caches (a preempted
// request's go back to 0 until it is prefilled again; a finished request's stay counted).
struct Progress {
  int finished = 0;
  int total = 0;
  int64_t step = 0;
  double elapsed_s = 0.0;
  int64_t output_tokens = 0;
  int64_t output_total = 0;
  int64_t prompt_tokens = 0;
  int64_t prompt_total = 0;
};

// Runs the workload to completion. On failure *out is left untouched.
Status run_engine(const EngineOptions& opts, const std::vector<RequestSpec>& requests,
                  const std::function<void(const Progress&)>& progress, RunResult* out);

// The default pool: every request's worst case at once (no preemption).
int default_pool_blocks(const std::vector<RequestSpec>& requests, int block_size, int spec_tokens);

}  // namespace engine
}  // namespace msa
