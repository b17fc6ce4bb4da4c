// The run report (JSON) and the human-readable summary printed at the end of `msa run`. The
// summary, like the plots of `msa report --plot` (python/msa/plot.py), is made from the report,
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
  bool batch_invariant = false;
  bool topk_union = false;      // --topk-union: the run gathered RunResult::topk_union
  std::string workload_source;  // "uniform" or the trace path
  double arrival_rate = 0.0;
};

// `dense` is the --compare-dense baseline run (same workload, dense attention everywhere), or
// nullptr.
json::Json build_report(const ReportContext& ctx, const RunResult& run, const RunResult* dense);

std::string format_summary(const json::Json& report);

// kParseError naming the first missing or mistyped field unless `report` is an msa run report
// (schema "msa-run-report/1") with every field format_summary reads.
Status validate_report(const json::Json& report);

// Checks that `path` can take an output file, before the work that produces it: not empty, not
// an existing file other than a regular one (a symlink, device, FIFO or directory is refused,
// never replaced), and in an existing directory where a file can be created. kIoError otherwise.
Status check_output_path(const std::string& path);

// Writes a new temporary file beside `path` (path.tmp.XXXXXX, created exclusively), then renames
// it over `path`, so a failure never leaves a partial file; refuses a path that
// check_output_path refuses. The temporary file is removed on failure.
Status write_file_atomic(const std::string& path, const std::string& text);
Status read_file(const std::string& path, std::string* text);

// p50 / p90 / p99 / min / max / mean (nearest rank) of a sample, as a JSON object.
json::Json distribution(std::vector<double> values);

}  // namespace engine
}  // namespace msa
