// The run report (JSON), the human-readable summary printed at the end of `msa run`, and the
// SVG picture of `msa report --plot`. The summary and the plot are both made from the report,
// so what is printed is what is saved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "engine/engine.h"
#include "msa/config.h"

namespace msa {
namespace engine {

struct ReportContext {
  std::string command;  // the command line as typed
  std::string preset;
  std::string backend;  // "cpu" or "cuda"
  std::string device;   // e.g. "CPU, 2 threads" or the CUDA device name
  int threads = 0;
  uint64_t seed = 0;
  ModelConfig model;
  RankShape shape;
  DType kv_dtype = DType::kBF16;
  DType index_dtype = DType::kBF16;
  int max_batch_tokens = 0;
  int kv_blocks = 0;
  int spec_tokens = 0;
  double spec_accept = 0.0;
  std::string workload_source;  // "uniform" or the trace path
  double arrival_rate = 0.0;
};

// `dense` is the --compare-dense baseline run (same workload, dense attention everywhere), or
// nullptr.
json::Value build_report(const ReportContext& ctx, const RunResult& run, const RunResult* dense);

std::string format_summary(const json::Value& report);

// Two panels: step latency against context length, and time per stage.
Status render_plot_svg(const json::Value& report, std::string* svg);

// Writes path.tmp, then renames it over path, so a failure never leaves a partial file.
Status write_file_atomic(const std::string& path, const std::string& text);
Status read_file(const std::string& path, std::string* text);

// p50 / p90 / p99 / min / max / mean (nearest rank) of a sample, as a JSON object.
json::Value distribution(std::vector<double> values);

}  // namespace engine
}  // namespace msa
