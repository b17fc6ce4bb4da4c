// The msa command-line program: runs the serving engine on a synthetic (or traced) workload,
// renders reports, and describes the build. Exit status: 0 success, 1 a run failed, 2 invalid
// arguments or input files.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/json.h"
#include "engine/engine.h"
#include "engine/report.h"
#include "engine/workload.h"
#include "msa/config.h"
#include "msa/version.h"

namespace {

using msa::Status;
using msa::StatusCode;
namespace eng = msa::engine;
namespace json = msa::json;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// The command being run ("run", "report", "info"), for error messages.
std::string g_command;

// Invalid arguments or input files end the program at once with status 2: nothing has been
// written yet (reports are written at the very end, their paths checked before the run), so
// there is nothing to clean up.
[[noreturn]] void usage_error(const std::string& message) {
  const std::string where = g_command.empty() ? "" : " " + g_command;
  std::cerr << "msa" << where << ": " << message << "\n";
  std::cerr << "(see `msa" << where << " --help`)\n";
  std::exit(kExitUsage);
}

// Checks of option values for CLI11, which runs them on the text before converting it and
// prefixes the option's name: "--requests: 'abc' is not an integer in [1, 1048576]".
CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > hi) {
          return "'" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]";
        }
        return "";
      },
      "");
}

CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(x) || x < lo || x > hi) {
          std::ostringstream os;
          os << "'" << v << "' is not a number in [" << lo << ", " << hi << "]";
          return os.str();
        }
        return "";
      },
      "");
}

// One of `names`; `expected` lists them for the message ("bf16 or fp8"), `what` names the
// kind of value when there is one ("preset": "unknown preset 'x', expected ...").
CLI::Validator one_of(std::vector<std::string> names, std::string expected, std::string what = "") {
  return CLI::Validator(
      [names = std::move(names), expected = std::move(expected),
       what = std::move(what)](std::string& v) -> std::string {
        for (const std::string& n : names) {
          if (v == n) return "";
        }
        return (what.empty() ? "" : "unknown " + what + " ") + "'" + v + "', expected " + expected;
      },
      "");
}

constexpr int64_t kMaxLength = int64_t{1} << 24;

// MIN:MAX (or N for N:N) token counts in [1, kMaxLength].
bool parse_range(const std::string& v, int64_t* lo, int64_t* hi, std::string* error) {
  const size_t colon = v.find(':');
  const std::string parts[2] = {v.substr(0, colon),
                                colon == std::string::npos ? v : v.substr(colon + 1)};
  int64_t values[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    std::string part = parts[i];
    const std::string e = integer_in(1, kMaxLength)(part);
    if (!e.empty()) {
      *error = "'" + v + "': " + e;
      return false;
    }
    values[i] = std::strtoll(part.c_str(), nullptr, 10);
  }
  if (values[0] > values[1]) {
    *error = "'" + v + "': MIN is larger than MAX";
    return false;
  }
  *lo = values[0];
  *hi = values[1];
  return true;
}

CLI::Validator token_range() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        int64_t lo = 0, hi = 0;
        std::string error;
        return parse_range(v, &lo, &hi, &error) ? "" : error;
      },
      "");
}

msa::DType dtype_of(const std::string& v) {
  return v == "bf16" ? msa::DType::kBF16 : msa::DType::kE4M3;
}

constexpr const char* kPresets[] = {"default", "minimax-m3-tp1", "minimax-m3-tp2", "minimax-m3-tp4",
                                    "minimax-m3-tp8"};

std::string joined_command(int argc, char** argv) {
  std::string s = "msa";
  for (int i = 1; i < argc; ++i) s += std::string(" ") + argv[i];
  return s;
}

struct Preset {
  msa::ModelConfig model;
  int tp = 4;
  eng::WorkloadOptions workload;
  int max_batch_tokens = 2048;
};

Preset make_preset(const std::string& name) {
  Preset p;
  p.model = msa::ModelConfig::minimax_m3();
  if (name == "default") {
    // CPU sized (about 25 s on two free cores): the TP4 rank's heads (16 q, 1 KV, 1 index,
    // D 128) with M3's sparse geometry (blocks of 128, top-16 = 2048 keys), 1 dense + 2 sparse
    // layers, and prompts of 2500-3500 tokens, so every decode row's context is past the 2048
    // selected keys and sparse attention skips blocks. The CPU backend's exact attention costs
    // O(context) per row (O(prompt^2) per dense layer in prefill), which bounds the layer count
    // and the workload.
    p.model.num_layers = 3;
    p.model.sparse_layers = {false, true, true};
    p.model.max_position_embeddings = 1 << 16;
    p.workload.num_requests = 6;
    p.workload.prompt_min = 2500;
    p.workload.prompt_max = 3500;
    p.workload.output_min = 16;
    p.workload.output_max = 32;
    p.max_batch_tokens = 2048;
    return p;
  }
  // minimax-m3-tpN (the names the --preset check allows).
  p.tp = std::stoi(name.substr(std::string("minimax-m3-tp").size()));
  p.workload.num_requests = 64;
  p.workload.prompt_min = 4096;
  p.workload.prompt_max = 16384;
  p.workload.output_min = 64;
  p.workload.output_max = 256;
  p.max_batch_tokens = 8192;
  return p;
}

// Progress on stderr. On a terminal, a bar redrawn in place after every step. Elsewhere (a log,
// a pipe) a line when `interval_s` seconds have passed since the last one (checked after each
// step, so a step longer than that gives one line), and one at the end. Prompt tokens count
// with output tokens, so the bar and the lines move during a long prefill.
class Progress {
 public:
  enum class Mode { kNone, kBar, kLines };
  Progress(Mode mode, std::string label, double interval_s)
      : mode_(mode), label_(std::move(label)), interval_s_(interval_s) {}

  void update(const eng::Progress& p) {
    last_ = p;
    if (mode_ == Mode::kBar) {
      const int width = 30;
      const int64_t total = p.prompt_total + p.output_total;
      const int filled =
          total > 0 ? static_cast<int>(width * (p.prompt_tokens + p.output_tokens) / total) : 0;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.append(static_cast<size_t>(width - filled), '.');
      std::fprintf(stderr, "\r%-6s [%s] %s ", label_.c_str(), bar.c_str(), counts(p).c_str());
      std::fflush(stderr);
      drawn_ = true;
    } else if (mode_ == Mode::kLines) {
      const auto now = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(now - printed_at_).count() >= interval_s_) {
        std::fprintf(stderr, "msa run: %s %s\n", label_.c_str(), counts(p).c_str());
        std::fflush(stderr);
        printed_at_ = now;
      }
    }
  }

  void finish() {
    if (mode_ == Mode::kBar && drawn_) std::fprintf(stderr, "\n");
    if (mode_ == Mode::kLines && last_.step > 0) {
      std::fprintf(stderr, "msa run: %s done: %s\n", label_.c_str(), counts(last_).c_str());
    }
    std::fflush(stderr);
  }

 private:
  static std::string counts(const eng::Progress& p) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%d/%d requests, prompt %lld/%lld tokens, output %lld/%lld tokens, step %lld, "
                  "%.1f s, %.0f out tok/s",
                  p.finished, p.total, static_cast<long long>(p.prompt_tokens),
                  static_cast<long long>(p.prompt_total), static_cast<long long>(p.output_tokens),
                  static_cast<long long>(p.output_total), static_cast<long long>(p.step),
                  p.elapsed_s,
                  p.elapsed_s > 0 ? static_cast<double>(p.output_tokens) / p.elapsed_s : 0.0);
    return line;
  }

  Mode mode_;
  std::string label_;
  double interval_s_;
  std::chrono::steady_clock::time_point printed_at_ = std::chrono::steady_clock::now();
  eng::Progress last_;
  bool drawn_ = false;
};

// CLI11's words for an option without its value ("--seed: 1 required N missing") or a flag
// given one ("quiet was given a disallowed flag override"), said plainly.
std::string mismatch_message(const CLI::App& command, const std::string& what) {
  for (const CLI::Option* o : command.get_options()) {
    for (const std::string& n : o->get_lnames()) {
      const std::string flag = "--" + n;
      const bool named = what.compare(0, flag.size() + 1, flag + ":") == 0 ||
                         what.compare(0, n.size() + 1, n + " ") == 0 ||
                         what.compare(0, flag.size() + 1, flag + " ") == 0;
      if (named)
        return flag + (o->get_expected_max() == 0 ? ": takes no value" : ": missing value");
    }
  }
  return what;
}

// What CLI11 left over: every command allows extras so that the first unknown option or
// unexpected argument is named alone ("unknown option '--bogus'"), a usage error.
void check_no_extras(const CLI::App& command) {
  const std::vector<std::string> extra = command.remaining();
  if (extra.empty()) return;
  const std::string& a = extra.front();
  if (a.size() > 1 && a[0] == '-') usage_error("unknown option '" + a.substr(0, a.find('=')) + "'");
  usage_error("unexpected argument '" + a + "'");
}

int status_exit(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kParseError:
    case StatusCode::kIoError:
    case StatusCode::kNotSupported:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

// `msa run`'s options. Values the preset sets (and --seed ...) count only when the option was
// given: `given(name)`.
struct RunArgs {
  CLI::App* app = nullptr;
  std::string preset = "default";
  std::string config, trace, report;
  std::string kv_dtype = "bf16", index_dtype = "bf16", backend = "auto";
  std::string prompt_len, output_len;
  int tp = 0, topk_freq = 1, requests = 0, spec_tokens = 0, threads = 0;
  int max_batch_tokens = 0, kv_blocks = 0, fidelity_rows = 2;
  double arrival_rate = 0.0, spec_accept = 0.0, progress_interval = 5.0;
  uint64_t seed = 0;
  bool compare_dense = false, quiet = false, batch_invariant = false, topk_union = false;

  bool given(const std::string& name) const { return app->count(name) > 0; }
};

CLI::App* add_run_command(CLI::App& msa_app, RunArgs* a) {
  CLI::App* run = msa_app.add_subcommand(
      "run", "serve a synthetic or traced workload through the layer stack and report");
  run->footer(
      "Runs requests through a continuous-batching engine (paged KV and index-key caches,\n"
      "chunked prefill, decode-first batches, optional speculative rows) over a stack of dense\n"
      "and sparse attention layers with synthetic activations, then prints a summary.\n"
      "Exit status: 0 success, 1 the run failed, 2 invalid arguments or input files.");
  a->app = run;
  const std::string model = "model", workload = "workload", engine = "engine", output = "output";
  run->add_option("--preset", a->preset,
                  "default: CPU sized (~25 s on 2 cores): 3 layers (1 dense + 2 sparse),\n"
                  "TP4-rank heads 16q/1kv/1idx, D 128, blocks of 128, top-16, 6 requests\n"
                  "of 2500-3500 + 16-32 tokens;\n"
                  "minimax-m3-tp1|-tp2|-tp4|-tp8: the full model's per-rank shapes\n"
                  "(60 layers, blocks of 128, top-16), GPU sized (64 requests of\n"
                  "4-16k + 64-256 tokens)")
      ->type_name("NAME")
      ->check(one_of({std::begin(kPresets), std::end(kPresets)},
                     "default, minimax-m3-tp1, -tp2, -tp4 or -tp8", "preset"))
      ->group(model);
  run->add_option("--config", a->config,
                  "Hugging Face config.json (text_config) replacing the preset's model")
      ->type_name("FILE")
      ->group(model);
  run->add_option("--tp", a->tp, "tensor-parallel size for the rank shapes (default: the preset's)")
      ->type_name("N")
      ->check(integer_in(1, 64))
      ->group(model);
  run->add_option("--kv-dtype", a->kv_dtype,
                  "main KV cache type (fp8 = e4m3 with a per-layer scale)")
      ->type_name("bf16|fp8")
      ->check(one_of({"bf16", "fp8", "e4m3"}, "bf16 or fp8"))
      ->group(model);
  run->add_option("--index-dtype", a->index_dtype, "index-key cache type (fp8 = e4m3, no scale)")
      ->type_name("bf16|fp8")
      ->check(one_of({"bf16", "fp8", "e4m3"}, "bf16 or fp8"))
      ->group(model);
  run->add_option("--topk-freq", a->topk_freq,
                  "cross-layer top-k reuse: every N-th sparse layer recomputes (1 = none)")
      ->type_name("N")
      ->check(integer_in(1, 1 << 20))
      ->group(model);
  run->add_option("--requests", a->requests, "number of requests")
      ->type_name("N")
      ->check(integer_in(1, 1 << 20))
      ->group(workload);
  run->add_option("--prompt-len", a->prompt_len, "prompt tokens, uniform (a single N means N:N)")
      ->type_name("MIN:MAX")
      ->check(token_range())
      ->group(workload);
  run->add_option("--output-len", a->output_len, "output tokens, uniform")
      ->type_name("MIN:MAX")
      ->check(token_range())
      ->group(workload);
  run->add_option("--trace", a->trace,
                  "requests from a file, one JSON object a line:\n"
                  "{\"arrival_s\", \"prompt_tokens\", \"output_tokens\"}")
      ->type_name("FILE.jsonl")
      ->group(workload);
  run->add_option("--arrival-rate", a->arrival_rate,
                  "Poisson arrivals, requests/s (0 = all at t = 0)")
      ->type_name("R")
      ->check(number_in(0.0, 1e9))
      ->group(workload);
  run->add_option("--spec-tokens", a->spec_tokens,
                  "draft tokens per decode step (0..7): query length 1 + N")
      ->type_name("N")
      ->check(integer_in(0, 7))
      ->group(workload);
  run->add_option("--spec-accept", a->spec_accept,
                  "probability that each successive draft is accepted (seeded)")
      ->type_name("P")
      ->check(number_in(0.0, 1.0))
      ->group(workload);
  run->add_option("--seed", a->seed, "seed of the workload, activations and acceptance draws")
      ->type_name("N")
      ->check(integer_in(0, INT64_MAX))
      ->group(workload);
  run->add_option("--backend", a->backend,
                  "where the ops run (auto: CUDA device 0 when there is one, else the CPU)")
      ->type_name("auto|cpu|cuda")
      ->check(one_of({"auto", "cpu", "cuda"}, "auto, cpu or cuda"))
      ->group(engine);
  run->add_option("--threads", a->threads, "CPU threads (0 = all)")
      ->type_name("N")
      ->check(integer_in(0, 64))
      ->group(engine);
  run->add_option("--max-batch-tokens", a->max_batch_tokens,
                  "token budget of a step (chunked prefill fills what decodes leave)")
      ->type_name("N")
      ->check(integer_in(1, 1 << 20))
      ->group(engine);
  run->add_option("--kv-blocks", a->kv_blocks,
                  "pages of 128 tokens per cache (default: enough for every request)")
      ->type_name("N")
      ->check(integer_in(1, 1 << 24))
      ->group(engine);
  run->add_flag("--batch-invariant", a->batch_invariant,
                "batch-invariant attention and index ops: a request's outputs do not\n"
                "depend on the other requests of its steps (CUDA: kernels chosen from\n"
                "per-row shapes, can be slower; the CPU backend always is invariant)")
      ->disable_flag_override()
      ->group(engine);
  run->add_option("--report", a->report,
                  "full report with per-step records (path checked before the run,\n"
                  "written atomically; a symlink or special file there is refused)")
      ->type_name("FILE.json")
      ->group(output);
  run->add_flag("--compare-dense", a->compare_dense,
                "rerun with dense attention in every sparse layer: speed-up and\n"
                "fidelity (relative error, selected probability mass) of sparse rows")
      ->disable_flag_override()
      ->group(output);
  run->add_flag("--topk-union", a->topk_union,
                "count the distinct blocks that the prefill rows of aligned windows of\n"
                "4, 8, 16 and 32 positions select together (the blocks a sparse prefill\n"
                "tile over them reads), from every prefill index op (read back: readback\n"
                "stage)")
      ->disable_flag_override()
      ->group(output);
  run->add_option("--fidelity-rows", a->fidelity_rows,
                  "rows per step compared with host dense attention (default 2)")
      ->type_name("N")
      ->check(integer_in(0, 1024))
      ->group(output);
  run->add_option("--progress-interval", a->progress_interval,
                  "seconds between progress lines when stderr is not a terminal\n"
                  "(default 5; 0 = after every step); a terminal gets a bar")
      ->type_name("S")
      ->check(number_in(0.0, 86400.0))
      ->group(output);
  run->add_flag("--quiet", a->quiet, "no progress and no summary")
      ->disable_flag_override()
      ->group(output);
  return run;
}

int cmd_run(const RunArgs& a, const std::string& command) {
  Preset p = make_preset(a.preset);
  if (a.given("--config")) {
    msa::ModelConfig cfg;
    Status s = msa::load_hf_config(a.config, &cfg);
    if (!s.ok()) usage_error("--config: " + s.message());
    p.model = cfg;
  }
  if (a.given("--tp")) p.tp = a.tp;
  if (a.given("--topk-freq")) {
    p.model.use_index_cache = a.topk_freq > 1;
    p.model.index_topk_freq = a.topk_freq;
  }
  msa::RankShape shape;
  Status s = msa::rank_shape(p.model, p.tp, &shape);
  if (!s.ok()) usage_error("model: " + s.message());

  eng::WorkloadOptions wo = p.workload;
  if (a.given("--requests")) wo.num_requests = a.requests;
  // Both ranges passed token_range() when they were parsed.
  std::string unused;
  if (a.given("--prompt-len")) parse_range(a.prompt_len, &wo.prompt_min, &wo.prompt_max, &unused);
  if (a.given("--output-len")) parse_range(a.output_len, &wo.output_min, &wo.output_max, &unused);
  if (a.given("--arrival-rate")) wo.arrival_rate = a.arrival_rate;
  if (a.given("--seed")) wo.seed = a.seed;
  std::vector<eng::RequestSpec> requests;
  std::string source = "uniform";
  if (a.given("--trace")) {
    source = a.trace;
    s = eng::load_trace(source, &requests);
  } else {
    s = eng::generate_workload(wo, &requests);
  }
  if (!s.ok()) usage_error(s.message());

  eng::EngineOptions eo;
  eo.runner.model = p.model;
  eo.runner.shape = shape;
  eo.runner.seed = wo.seed;
  eo.runner.kv_dtype = dtype_of(a.kv_dtype);
  eo.runner.index_dtype = dtype_of(a.index_dtype);
  eo.runner.threads = a.threads;
  eo.runner.batch_invariant = a.batch_invariant;
  eo.runner.topk_union = a.topk_union;
  const std::string& backend = a.backend;
  const bool gpu = msa::built_with_cuda() && msa::cuda_device_count() > 0;
  if (backend == "cuda" && !msa::built_with_cuda()) {
    usage_error(
        "--backend cuda: this build of msa has no CUDA backend (configure with "
        "-DMSA_WITH_CUDA=ON)");
  }
  if (backend == "cuda" && !gpu) usage_error("--backend cuda: no CUDA device is available");
  const bool use_cuda = backend == "cuda" || (backend == "auto" && gpu);
  eo.runner.device = use_cuda ? msa::Device::cuda(0) : msa::Device::cpu();
  const bool compare = a.compare_dense;
  eo.runner.fidelity_rows_per_step = compare ? a.fidelity_rows : 0;

  eo.scheduler.block_size = p.model.sparse_block_size;
  eo.scheduler.seed = wo.seed;
  eo.scheduler.max_batch_tokens =
      a.given("--max-batch-tokens") ? a.max_batch_tokens : p.max_batch_tokens;
  eo.scheduler.spec_tokens = a.spec_tokens;
  if (a.given("--spec-accept")) eo.scheduler.spec_accept = a.spec_accept;
  eo.scheduler.num_blocks =
      a.given("--kv-blocks")
          ? a.kv_blocks
          : eng::default_pool_blocks(requests, eo.scheduler.block_size, eo.scheduler.spec_tokens);
  const std::string& report_path = a.report;
  // The report's path is checked before the run, which can take long: a missing directory or a
  // special file (never replaced) are usage errors.
  if (a.given("--report")) {
    s = eng::check_output_path(report_path);
    if (!s.ok()) usage_error("--report: " + s.message());
  }
  const bool quiet = a.quiet;
  const Progress::Mode mode = quiet                        ? Progress::Mode::kNone
                              : isatty(STDERR_FILENO) != 0 ? Progress::Mode::kBar
                                                           : Progress::Mode::kLines;

  eng::RunResult run, dense;
  {
    Progress progress(mode, compare ? "sparse" : "run", a.progress_interval);
    s = eng::run_engine(
        eo, requests, [&](const eng::Progress& pr) { progress.update(pr); }, &run);
    progress.finish();
  }
  if (!s.ok()) {
    std::cerr << "msa run: " << s.message() << "\n";
    return status_exit(s);
  }
  if (compare) {
    eng::EngineOptions d = eo;
    d.runner.dense_everywhere = true;
    d.runner.fidelity_rows_per_step = 0;
    d.runner.topk_union = false;
    Progress progress(mode, "dense", a.progress_interval);
    s = eng::run_engine(
        d, requests, [&](const eng::Progress& pr) { progress.update(pr); }, &dense);
    progress.finish();
    if (!s.ok()) {
      std::cerr << "msa run (dense baseline): " << s.message() << "\n";
      return status_exit(s);
    }
  }

  eng::ReportContext ctx;
  ctx.command = command;
  ctx.preset = a.given("--config") ? a.config : a.preset;
  ctx.backend = use_cuda ? "cuda" : "cpu";
  const int threads = eo.runner.threads > 0
                          ? eo.runner.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ctx.device =
      use_cuda ? eng::describe_cuda_device(0) : "CPU, " + std::to_string(threads) + " threads";
  ctx.threads = threads;
  ctx.seed = wo.seed;
  ctx.model = p.model;
  ctx.shape = shape;
  ctx.kv_dtype = eo.runner.kv_dtype;
  ctx.index_dtype = eo.runner.index_dtype;
  ctx.max_batch_tokens = eo.scheduler.max_batch_tokens;
  ctx.kv_blocks = eo.scheduler.num_blocks;
  ctx.spec_tokens = eo.scheduler.spec_tokens;
  ctx.spec_accept = eo.scheduler.spec_accept;
  ctx.workload_source = source;
  ctx.arrival_rate = wo.arrival_rate;
  ctx.batch_invariant = eo.runner.batch_invariant;
  ctx.topk_union = eo.runner.topk_union;
  const json::Json report = eng::build_report(ctx, run, compare ? &dense : nullptr);
  if (a.given("--report")) {
    s = eng::write_file_atomic(report_path, json::dump(report, 1) + "\n");
    if (!s.ok()) {
      std::cerr << "msa run: --report: " << s.message() << "\n";
      return kExitFailure;
    }
  }
  if (!quiet) std::cout << eng::format_summary(report);
  return 0;
}

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Runs argv (argv[0] looked up on PATH) to completion with the program's stdin and stderr; its
// stdout goes to *out when `out` is given, else to the program's. *exit_code is the exit status
// (128 + the signal when it was killed). False, with the reason in *error, when the program
// could not be started.
bool run_program(const std::vector<std::string>& argv, std::string* out, int* exit_code,
                 std::string* error) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int pipe_fds[2] = {-1, -1};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (out != nullptr) {
    if (pipe(pipe_fds) != 0) {
      *error = std::strerror(errno);
      posix_spawn_file_actions_destroy(&actions);
      return false;
    }
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  }
  std::cout.flush();
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (out != nullptr) close(pipe_fds[1]);
  if (rc != 0) {
    if (out != nullptr) close(pipe_fds[0]);
    *error = std::strerror(rc);
    return false;
  }
  if (out != nullptr) {
    char buf[4096];
    ssize_t n = 0;
    while ((n = read(pipe_fds[0], buf, sizeof(buf))) != 0) {
      if (n > 0) {
        out->append(buf, static_cast<size_t>(n));
      } else if (errno != EINTR) {
        break;
      }
    }
    close(pipe_fds[0]);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      *error = std::strerror(errno);
      return false;
    }
  }
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

// `msa report --plot`: the plots are drawn by the msa Python package with matplotlib
// (python/msa/plot.py, the one implementation), run as `$MSA_PYTHON -m msa plot` (python3 by
// default). A probe that imports nothing says first which of its modules are missing.
int draw_plots(const std::string& report, const std::string& out) {
  const char* env = std::getenv("MSA_PYTHON");
  const std::string python = env != nullptr && *env != '\0' ? env : "python3";
  const std::string how =
      "install them with `pip install --no-build-isolation \"./python[plot]\"` (after torch), or "
      "set MSA_PYTHON to a Python that has them";
  const std::string probe =
      "import importlib.util as u\n"
      "print(' '.join(m for m in ('torch', 'msa', 'matplotlib') if u.find_spec(m) is None))";
  std::string missing, error;
  int rc = 0;
  if (!run_program({python, "-c", probe}, &missing, &rc, &error)) {
    std::cerr << "msa report: --plot draws with Python (the msa package and matplotlib), but '"
              << python << "' cannot be run: " << error << "; " << how << "\n";
    return kExitFailure;
  }
  while (!missing.empty() && (missing.back() == '\n' || missing.back() == ' ')) missing.pop_back();
  if (rc != 0) {
    std::cerr << "msa report: --plot: '" << python << "' is not a working Python 3 (the probe "
              << "exited with status " << rc << "); " << how << "\n";
    return kExitFailure;
  }
  if (!missing.empty()) {
    std::cerr << "msa report: --plot draws with the msa Python package and matplotlib, but '"
              << python << "' has no module " << missing << "; " << how << "\n";
    return kExitFailure;
  }
  if (!run_program({python, "-m", "msa", "plot", report, "-o", out}, nullptr, &rc, &error)) {
    std::cerr << "msa report: --plot: cannot run '" << python << "': " << error << "\n";
    return kExitFailure;
  }
  if (rc != 0) {
    std::cerr << "msa report: --plot: `" << python << " -m msa plot` failed (exit status " << rc
              << ")\n";
    return rc == kExitUsage ? kExitUsage : kExitFailure;
  }
  return 0;
}

struct ReportArgs {
  std::string file, plot;
  bool plot_given = false;
};

CLI::App* add_report_command(CLI::App& msa_app, ReportArgs* a) {
  CLI::App* report = msa_app.add_subcommand(
      "report", "print the summary of a saved run report, or plot it (--plot)");
  report->footer(
      "Prints the summary of a report written by `msa run --report`. With --plot, draws its\n"
      "plots instead (PNG or SVG by the extension): step time on a log axis, prefill and decode\n"
      "steps apart; the time per stage; throughput over the run; and, for a --compare-dense\n"
      "run, sparse against dense speed and the error of sampled rows. The plots are drawn by\n"
      "the msa Python package with matplotlib (`python3 -m msa plot FILE.json -o OUT`);\n"
      "MSA_PYTHON names another Python.\n"
      "Exit status: 0 success, 1 the plot failed, 2 invalid arguments or input files.");
  report->add_option("FILE.json", a->file, "report written by `msa run --report`")->required();
  report->add_option("--plot", a->plot, "draw the plots into this file")
      ->type_name("FILE.png|FILE.svg");
  return report;
}

int cmd_report(const ReportArgs& a) {
  std::string text;
  Status s = eng::read_file(a.file, &text);
  if (!s.ok()) usage_error(s.message());
  json::Json rep;
  s = json::parse(text, &rep);
  if (!s.ok()) usage_error(a.file + ": " + s.message());
  s = eng::validate_report(rep);
  if (!s.ok()) usage_error(a.file + ": " + s.message());
  if (a.plot_given) {
    const std::string& out = a.plot;
    if (!has_suffix(out, ".png") && !has_suffix(out, ".svg")) {
      usage_error("--plot: '" + out + "': the output must end in .png or .svg");
    }
    s = eng::check_output_path(out);
    if (!s.ok()) usage_error("--plot: " + s.message());
    return draw_plots(a.file, out);
  }
  std::cout << eng::format_summary(rep);
  return 0;
}

int cmd_info() {
  const int devices = msa::cuda_device_count();
  std::cout << "msa " << msa::version_string() << "\n";
  std::cout << "build:\n  CUDA backend   " << (msa::built_with_cuda() ? "yes" : "no")
            << "\n  compiler       " << __VERSION__ << "\n  C++ standard   " << __cplusplus << "\n";
  std::cout << "backends:\n  cpu            yes (" << std::thread::hardware_concurrency()
            << " hardware threads; deterministic for every thread count)\n";
  std::cout << "  cuda           "
            << (msa::built_with_cuda() ? (devices > 0 ? "yes" : "built, but no device")
                                       : "not built")
            << "\n";
  std::cout << "CUDA devices: " << devices << "\n";
  for (int d = 0; d < devices; ++d) {
    std::cout << "  [" << d << "] " << eng::describe_cuda_device(d) << "\n";
  }
  std::cout << "specialisations (ahead-of-time; no JIT):\n"
               "  cpu   any head_dim, index_dim and block size; q/k/v bf16 or f16; KV cache bf16,\n"
               "        f16 or e4m3 (scale none, per layer, per token-head); index cache bf16 or\n"
               "        e4m3; decode query length 1..8\n"
               "  cuda  sm_90a. Sparse attention: head_dim 64 or 128, block size a multiple of\n"
               "        16, top-k width <= 256. Dense attention: head_dim 64, 128 or 256, <= 16 q\n"
               "        heads per KV head. Fused norm/RoPE/insert: head_dim a multiple of 32 up\n"
               "        to 256, index_dim = head_dim. Indexer: index_dim a multiple of 8 up to\n"
               "        256, <= 32 index heads, query_len * index heads <= 32. KV cache bf16/f16\n"
               "        or e4m3 (all scale modes); index cache bf16 or e4m3\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("MiniMax-M3 block-sparse attention (MSA): serving engine and tools.", "msa");
  app.set_version_flag("--version", std::string("msa ") + msa::version_string());
  app.footer("Exit status: 0 success, 1 the run failed, 2 invalid arguments or input files.");
  app.get_formatter()->column_width(28);
  app.require_subcommand(1);
  RunArgs run_args;
  CLI::App* run = add_run_command(app, &run_args);
  ReportArgs report_args;
  CLI::App* report = add_report_command(app, &report_args);
  CLI::App* info = app.add_subcommand(
      "info", "version, build options, backends, CUDA devices, compiled specialisations");
  std::string topic;
  CLI::App* help =
      app.add_subcommand("help", "this text; `msa help <command>` or `msa <command> --help`");
  help->add_option("command", topic, "the command to describe");
  const std::vector<CLI::App*> commands = {run, report, info, help};

  if (argc < 2) {
    std::cerr << app.help();
    return kExitUsage;
  }
  // The command first: CLI11 would only say that one is required.
  const std::string first = argv[1];
  for (CLI::App* c : commands) {
    if (c->get_name() == first) g_command = first == "help" ? "" : first;
  }
  const bool program_flag = first == "-h" || first == "--help" || first == "--version";
  if (g_command.empty() && first != "help" && !program_flag) {
    usage_error((first.compare(0, 1, "-") == 0 ? "unknown option '" : "unknown command '") + first +
                "'; a command comes first: run, report, info or help");
  }
  for (CLI::App* c : commands) c->allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << (app.get_subcommands().empty() ? app.help()
                                                : app.get_subcommands()[0]->help("msa"));
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return 0;
  } catch (const CLI::ArgumentMismatch& e) {
    const CLI::App* command = app.get_subcommands().empty() ? &app : app.get_subcommands()[0];
    usage_error(mismatch_message(*command, e.what()));
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }
  for (CLI::App* c : commands) {
    if (c->parsed()) check_no_extras(*c);
  }
  if (run->parsed()) return cmd_run(run_args, joined_command(argc, argv));
  if (report->parsed()) {
    report_args.plot_given = report->count("--plot") > 0;
    return cmd_report(report_args);
  }
  if (info->parsed()) return cmd_info();
  if (topic.empty()) {
    std::cout << app.help();
    return 0;
  }
  for (CLI::App* c : commands) {
    if (c->get_name() == topic) {
      std::cout << c->help("msa");
      return 0;
    }
  }
  usage_error("help: unknown command '" + topic + "'");
}
