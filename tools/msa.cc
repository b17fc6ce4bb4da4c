// The msa command-line program: runs the serving engine on a synthetic (or traced) workload,
// renders reports, and describes the build. Exit status: 0 success, 1 a run failed, 2 invalid
// arguments or input files.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

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

// The command being parsed, for error messages.
std::string g_command;

// Invalid arguments or input files end the program at once with status 2: nothing has been
// written yet (reports are written at the very end, their paths checked before the run), so
// there is nothing to clean up.
[[noreturn]] void usage_error(const std::string& message) {
  const std::string where = g_command.empty() ? "" : " " + g_command;
  std::cerr << "msa" << where << ": " << message << "\n";
  if (!where.empty()) std::cerr << "(see `msa" << where << " --help`)\n";
  std::exit(kExitUsage);
}

const char* const kMainHelp = R"(usage: msa <command> [options]

MiniMax-M3 block-sparse attention (MSA): serving engine and tools.

commands:
  run      serve a synthetic or traced workload through the layer stack and report
  report   print the summary of a saved run report, or plot it (--plot FILE.png|FILE.svg)
  info     version, build options, backends, CUDA devices, compiled specialisations
  help     this text; `msa help <command>` or `msa <command> --help` for details

exit status: 0 success, 1 the run failed, 2 invalid arguments or input files.
)";

const char* const kRunHelp = R"(usage: msa run [options]

Runs requests through a continuous-batching engine (paged KV and index-key caches, chunked
prefill, decode-first batches, optional speculative rows) over a stack of dense and sparse
attention layers with synthetic activations, then prints a summary.

model:
  --preset NAME          default: CPU sized (~25 s on 2 cores): 3 layers (1 dense + 2 sparse),
                         TP4-rank heads 16q/1kv/1idx, D 128, blocks of 128, top-16, 6 requests
                         of 2500-3500 + 16-32 tokens;
                         minimax-m3-tp1|-tp2|-tp4|-tp8: the full model's per-rank shapes
                         (60 layers, blocks of 128, top-16), GPU sized (64 requests of
                         4-16k + 64-256 tokens)
  --config FILE          Hugging Face config.json (text_config) replacing the preset's model
  --tp N                 tensor-parallel size for the rank shapes (default: the preset's)
  --kv-dtype bf16|fp8    main KV cache type (fp8 = e4m3 with a per-layer scale)
  --index-dtype bf16|fp8 index-key cache type (fp8 = e4m3, no scale)
  --topk-freq N          cross-layer top-k reuse: every N-th sparse layer recomputes (1 = none)
workload:
  --requests N           number of requests
  --prompt-len MIN:MAX   prompt tokens, uniform (a single N means N:N)
  --output-len MIN:MAX   output tokens, uniform
  --trace FILE.jsonl     requests from a file: {"arrival_s", "prompt_tokens", "output_tokens"}
  --arrival-rate R       Poisson arrivals, requests/s (0 = all at t = 0)
  --spec-tokens N        draft tokens per decode step (0..7): query length 1 + N
  --spec-accept P        probability that each successive draft is accepted (seeded)
  --seed N               seed of the workload, activations and acceptance draws
engine:
  --backend auto|cpu|cuda
  --threads N            CPU threads (0 = all)
  --max-batch-tokens N   token budget of a step (chunked prefill fills what decodes leave)
  --kv-blocks N          pages of 128 tokens per cache (default: enough for every request)
output:
  --report FILE.json     full report with per-step records (path checked before the run,
                         written atomically; a symlink or special file there is refused)
  --compare-dense        rerun with dense attention in every sparse layer: speed-up and
                         fidelity (relative error, selected probability mass) of sparse rows
  --fidelity-rows N      rows per step compared with host dense attention (default 2)
  --quiet                no progress bar and no summary
)";

const char* const kReportHelp = R"(usage: msa report FILE.json [--plot FILE.png|FILE.svg]

Prints the summary of a report written by `msa run --report`. With --plot, draws its plots
instead (PNG or SVG by the extension): step time on a log axis, prefill and decode steps apart;
the time per stage; throughput over the run; and, for a --compare-dense run, sparse against
dense speed and the error of sampled rows. The plots are drawn by the msa Python package with
matplotlib (`python3 -m msa plot FILE.json -o OUT`); MSA_PYTHON names another Python.
)";

const char* const kInfoHelp = R"(usage: msa info

Prints the library version, build options, backends, CUDA devices and the specialisations the
compiled kernels support.
)";

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > hi) {
    usage_error(flag + ": '" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  }
  return x;
}

double parse_double(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(x) || x < lo || x > hi) {
    usage_error(flag + ": '" + v + "' is not a number in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  }
  return x;
}

void parse_range(const std::string& flag, const std::string& v, int64_t* lo, int64_t* hi) {
  const size_t colon = v.find(':');
  const int64_t max = int64_t{1} << 24;
  if (colon == std::string::npos) {
    *lo = *hi = parse_int(flag, v, 1, max);
  } else {
    *lo = parse_int(flag, v.substr(0, colon), 1, max);
    *hi = parse_int(flag, v.substr(colon + 1), 1, max);
  }
  if (*lo > *hi) usage_error(flag + ": '" + v + "': MIN is larger than MAX");
}

msa::DType parse_dtype(const std::string& flag, const std::string& v) {
  if (v == "bf16") return msa::DType::kBF16;
  if (v == "fp8" || v == "e4m3") return msa::DType::kE4M3;
  usage_error(flag + ": '" + v + "', expected bf16 or fp8");
}

// Splits argv into --flag value pairs, checking names against the command's flag set.
struct Args {
  std::map<std::string, std::string> values;
  std::vector<std::string> positional;
  bool has(const std::string& f) const { return values.count(f) != 0; }
  const std::string& get(const std::string& f) const { return values.at(f); }
};

Args parse_args(const std::vector<std::string>& argv, const std::vector<std::string>& with_value,
                const std::vector<std::string>& switches) {
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string f = argv[i];
    if (f.size() < 2 || f[0] != '-') {
      a.positional.push_back(f);
      continue;
    }
    std::string value;
    bool inline_value = false;
    const size_t eq = f.find('=');
    if (eq != std::string::npos) {
      value = f.substr(eq + 1);
      f = f.substr(0, eq);
      inline_value = true;
    }
    auto in = [&](const std::vector<std::string>& set) {
      for (const auto& s : set) {
        if (s == f) return true;
      }
      return false;
    };
    if (in(switches)) {
      if (inline_value) usage_error(f + ": takes no value");
      a.values[f] = "1";
    } else if (in(with_value)) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) usage_error(f + ": missing value");
        value = argv[++i];
      }
      a.values[f] = value;
    } else {
      usage_error("unknown option '" + f + "'");
    }
  }
  return a;
}

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
  const std::string prefix = "minimax-m3-tp";
  if (name.compare(0, prefix.size(), prefix) == 0) {
    const std::string tp = name.substr(prefix.size());
    if (tp == "1" || tp == "2" || tp == "4" || tp == "8") {
      p.tp = std::stoi(tp);
      p.workload.num_requests = 64;
      p.workload.prompt_min = 4096;
      p.workload.prompt_max = 16384;
      p.workload.output_min = 64;
      p.workload.output_max = 256;
      p.max_batch_tokens = 8192;
      return p;
    }
  }
  usage_error("--preset: unknown preset '" + name +
              "', expected default, minimax-m3-tp1, -tp2, -tp4 or -tp8");
}

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string label) : enabled_(enabled), label_(std::move(label)) {}
  void update(const eng::Progress& p) {
    if (!enabled_) return;
    const int width = 30;
    const int filled = p.total > 0 ? width * p.finished / p.total : 0;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(width - filled), '.');
    std::fprintf(stderr, "\r%s [%s] %d/%d requests  step %lld  %.1f s  %.0f out tok/s ",
                 label_.c_str(), bar.c_str(), p.finished, p.total, static_cast<long long>(p.step),
                 p.elapsed_s,
                 p.elapsed_s > 0 ? static_cast<double>(p.output_tokens) / p.elapsed_s : 0.0);
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  bool enabled_;
  std::string label_;
  bool drawn_ = false;
};

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

int cmd_run(const std::vector<std::string>& argv, const std::string& command) {
  const Args a = parse_args(
      argv,
      {"--preset",       "--config",           "--tp",          "--kv-dtype",   "--index-dtype",
       "--topk-freq",    "--requests",         "--prompt-len",  "--output-len", "--trace",
       "--arrival-rate", "--spec-tokens",      "--spec-accept", "--seed",       "--backend",
       "--threads",      "--max-batch-tokens", "--kv-blocks",   "--report",     "--fidelity-rows"},
      {"--compare-dense", "--quiet", "--help", "-h"});
  if (a.has("--help") || a.has("-h")) {
    std::cout << kRunHelp;
    return 0;
  }
  if (!a.positional.empty()) usage_error("unexpected argument '" + a.positional[0] + "'");

  Preset p = make_preset(a.has("--preset") ? a.get("--preset") : "default");
  const std::string preset_name = a.has("--preset") ? a.get("--preset") : "default";
  if (a.has("--config")) {
    msa::ModelConfig cfg;
    Status s = msa::load_hf_config(a.get("--config"), &cfg);
    if (!s.ok()) usage_error("--config: " + s.message());
    p.model = cfg;
  }
  if (a.has("--tp")) p.tp = static_cast<int>(parse_int("--tp", a.get("--tp"), 1, 64));
  if (a.has("--topk-freq")) {
    const int f = static_cast<int>(parse_int("--topk-freq", a.get("--topk-freq"), 1, 1 << 20));
    p.model.use_index_cache = f > 1;
    p.model.index_topk_freq = f;
  }
  msa::RankShape shape;
  Status s = msa::rank_shape(p.model, p.tp, &shape);
  if (!s.ok()) usage_error("model: " + s.message());

  eng::WorkloadOptions wo = p.workload;
  if (a.has("--requests")) {
    wo.num_requests = static_cast<int>(parse_int("--requests", a.get("--requests"), 1, 1 << 20));
  }
  if (a.has("--prompt-len"))
    parse_range("--prompt-len", a.get("--prompt-len"), &wo.prompt_min, &wo.prompt_max);
  if (a.has("--output-len"))
    parse_range("--output-len", a.get("--output-len"), &wo.output_min, &wo.output_max);
  if (a.has("--arrival-rate")) {
    wo.arrival_rate = parse_double("--arrival-rate", a.get("--arrival-rate"), 0.0, 1e9);
  }
  if (a.has("--seed")) {
    wo.seed = static_cast<uint64_t>(parse_int("--seed", a.get("--seed"), 0, INT64_MAX));
  }
  std::vector<eng::RequestSpec> requests;
  std::string source = "uniform";
  if (a.has("--trace")) {
    source = a.get("--trace");
    s = eng::load_trace(source, &requests);
  } else {
    s = eng::generate_workload(wo, &requests);
  }
  if (!s.ok()) usage_error(s.message());

  eng::EngineOptions eo;
  eo.runner.model = p.model;
  eo.runner.shape = shape;
  eo.runner.seed = wo.seed;
  if (a.has("--kv-dtype")) eo.runner.kv_dtype = parse_dtype("--kv-dtype", a.get("--kv-dtype"));
  if (a.has("--index-dtype")) {
    eo.runner.index_dtype = parse_dtype("--index-dtype", a.get("--index-dtype"));
  }
  if (a.has("--threads")) {
    eo.runner.threads = static_cast<int>(parse_int("--threads", a.get("--threads"), 0, 64));
  }
  const std::string backend = a.has("--backend") ? a.get("--backend") : "auto";
  if (backend != "auto" && backend != "cpu" && backend != "cuda") {
    usage_error("--backend: '" + backend + "', expected auto, cpu or cuda");
  }
  const bool gpu = msa::built_with_cuda() && msa::cuda_device_count() > 0;
  if (backend == "cuda" && !msa::built_with_cuda()) {
    usage_error(
        "--backend cuda: this build of msa has no CUDA backend (configure with "
        "-DMSA_WITH_CUDA=ON)");
  }
  if (backend == "cuda" && !gpu) usage_error("--backend cuda: no CUDA device is available");
  const bool use_cuda = backend == "cuda" || (backend == "auto" && gpu);
  eo.runner.device = use_cuda ? msa::Device::cuda(0) : msa::Device::cpu();
  eo.runner.fidelity_rows_per_step =
      a.has("--fidelity-rows")
          ? static_cast<int>(parse_int("--fidelity-rows", a.get("--fidelity-rows"), 0, 1024))
          : 2;
  const bool compare = a.has("--compare-dense");
  if (!compare) eo.runner.fidelity_rows_per_step = 0;

  eo.scheduler.block_size = p.model.sparse_block_size;
  eo.scheduler.seed = wo.seed;
  eo.scheduler.max_batch_tokens =
      a.has("--max-batch-tokens")
          ? static_cast<int>(
                parse_int("--max-batch-tokens", a.get("--max-batch-tokens"), 1, 1 << 20))
          : p.max_batch_tokens;
  if (a.has("--spec-tokens")) {
    eo.scheduler.spec_tokens =
        static_cast<int>(parse_int("--spec-tokens", a.get("--spec-tokens"), 0, 7));
  }
  if (a.has("--spec-accept")) {
    eo.scheduler.spec_accept = parse_double("--spec-accept", a.get("--spec-accept"), 0.0, 1.0);
  }
  eo.scheduler.num_blocks =
      a.has("--kv-blocks")
          ? static_cast<int>(parse_int("--kv-blocks", a.get("--kv-blocks"), 1, 1 << 24))
          : eng::default_pool_blocks(requests, eo.scheduler.block_size, eo.scheduler.spec_tokens);
  const std::string report_path = a.has("--report") ? a.get("--report") : "";
  // The report's path is checked before the run, which can take long: an empty path, a missing
  // directory or a special file (never replaced) are usage errors.
  if (a.has("--report")) {
    s = eng::check_output_path(report_path);
    if (!s.ok()) usage_error("--report: " + s.message());
  }
  const bool quiet = a.has("--quiet");
  const bool tty = !quiet && isatty(STDERR_FILENO) != 0;

  eng::RunResult run, dense;
  {
    ProgressBar bar(tty, compare ? "sparse" : "run");
    s = eng::run_engine(
        eo, requests, [&](const eng::Progress& pr) { bar.update(pr); }, &run);
    bar.finish();
  }
  if (!s.ok()) {
    std::cerr << "msa run: " << s.message() << "\n";
    return status_exit(s);
  }
  if (compare) {
    eng::EngineOptions d = eo;
    d.runner.dense_everywhere = true;
    d.runner.fidelity_rows_per_step = 0;
    ProgressBar bar(tty, "dense ");
    s = eng::run_engine(
        d, requests, [&](const eng::Progress& pr) { bar.update(pr); }, &dense);
    bar.finish();
    if (!s.ok()) {
      std::cerr << "msa run (dense baseline): " << s.message() << "\n";
      return status_exit(s);
    }
  }

  eng::ReportContext ctx;
  ctx.command = command;
  ctx.preset = a.has("--config") ? a.get("--config") : preset_name;
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
  const json::Json report = eng::build_report(ctx, run, compare ? &dense : nullptr);
  if (a.has("--report")) {
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

int cmd_report(const std::vector<std::string>& argv) {
  const Args a = parse_args(argv, {"--plot"}, {"--help", "-h"});
  if (a.has("--help") || a.has("-h")) {
    std::cout << kReportHelp;
    return 0;
  }
  if (a.positional.size() != 1) usage_error("expected one report file (FILE.json)");
  std::string text;
  Status s = eng::read_file(a.positional[0], &text);
  if (!s.ok()) usage_error(s.message());
  json::Json rep;
  s = json::parse(text, &rep);
  if (!s.ok()) usage_error(a.positional[0] + ": " + s.message());
  s = eng::validate_report(rep);
  if (!s.ok()) usage_error(a.positional[0] + ": " + s.message());
  if (a.has("--plot")) {
    const std::string& out = a.get("--plot");
    if (!has_suffix(out, ".png") && !has_suffix(out, ".svg")) {
      usage_error("--plot: '" + out + "': the output must end in .png or .svg");
    }
    s = eng::check_output_path(out);
    if (!s.ok()) usage_error("--plot: " + s.message());
    return draw_plots(a.positional[0], out);
  }
  std::cout << eng::format_summary(rep);
  return 0;
}

int cmd_info(const std::vector<std::string>& argv) {
  const Args a = parse_args(argv, {}, {"--help", "-h"});
  if (a.has("--help") || a.has("-h")) {
    std::cout << kInfoHelp;
    return 0;
  }
  if (!a.positional.empty()) usage_error("unexpected argument '" + a.positional[0] + "'");
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
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kMainHelp;
    return kExitUsage;
  }
  const std::string cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  g_command = cmd == "run" || cmd == "report" || cmd == "info" ? cmd : "";
  if (cmd == "run") return cmd_run(rest, joined_command(argc, argv));
  if (cmd == "report") return cmd_report(rest);
  if (cmd == "info") return cmd_info(rest);
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    if (rest.empty()) {
      std::cout << kMainHelp;
    } else if (rest[0] == "run") {
      std::cout << kRunHelp;
    } else if (rest[0] == "report") {
      std::cout << kReportHelp;
    } else if (rest[0] == "info") {
      std::cout << kInfoHelp;
    } else {
      usage_error("help: unknown command '" + rest[0] + "'");
    }
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "msa " << msa::version_string() << "\n";
    return 0;
  }
  usage_error("unknown command '" + cmd + "' (try `msa --help`)");
}
