// The requests of a run: generated from seeded length distributions and a Poisson arrival
// process, or read from a JSONL trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "msa/types.h"

namespace msa {
namespace engine {

// Token counts of one request are at most this (positions are int32 in the ops).
constexpr int64_t kMaxRequestTokens = (int64_t{1} << 31) - 1;

struct RequestSpec {
  int64_t id = 0;
  double arrival_s = 0.0;  // offset from the start of the run
  int64_t prompt_tokens = 1;
  int64_t output_tokens = 1;
};

struct WorkloadOptions {
  int num_requests = 8;
  int64_t prompt_min = 1024;
  int64_t prompt_max = 4096;
  int64_t output_min = 32;
  int64_t output_max = 64;
  double arrival_rate = 0.0;  // requests per second, Poisson; 0 = all arrive at t = 0
  uint64_t seed = 0;
};

// Prompt and output lengths uniform in [min, max], inter-arrival gaps exponential with mean
// 1 / arrival_rate; all drawn from counter-based hashes of (seed, request).
Status generate_workload(const WorkloadOptions& opts, std::vector<RequestSpec>* out);

// One JSON object per non-empty line: {"arrival_s": s, "prompt_tokens": n, "output_tokens": m}
// (arrival_s optional, default 0; n and m in [1, kMaxRequestTokens]). Requests are numbered in file
// order and sorted by arrival.
Status parse_trace(const std::string& text, std::vector<RequestSpec>* out);
Status load_trace(const std::string& path, std::vector<RequestSpec>* out);

}  // namespace engine
}  // namespace msa
