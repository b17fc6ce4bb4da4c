#include "engine/report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "msa/version.h"

#define MSA_ENGINE_RETURN_IF_ERROR(expr) \
  do {                                   \
    ::msa::Status msa_s_ = (expr);       \
    if (!msa_s_.ok()) return msa_s_;     \
  } while (0)

namespace msa {
namespace engine {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string hex64(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Readers of a report that validate_report accepted: a missing or null member reads as 0, an
// empty string or a null value.
double num(const json::Json& v, const std::string& key) {
  const json::Json* m = json::find(v, key);
  return m != nullptr && m->is_number() ? m->get<double>() : 0.0;
}

int64_t ival(const json::Json& v, const std::string& key) {
  const json::Json* m = json::find(v, key);
  int64_t i = 0;
  if (m == nullptr || !m->is_number()) return 0;
  return json::exact_int(*m, &i) ? i : std::llround(m->get<double>());
}

std::string str(const json::Json& v, const std::string& key) {
  const json::Json* m = json::find(v, key);
  return m != nullptr && m->is_string() ? m->get<std::string>() : "";
}

bool flag(const json::Json& v, const std::string& key) {
  const json::Json* m = json::find(v, key);
  return m != nullptr && m->is_boolean() && m->get<bool>();
}

const json::Json& member(const json::Json& v, const std::string& key) {
  static const json::Json kNull;
  const json::Json* m = json::find(v, key);
  return m != nullptr ? *m : kNull;
}

json::Json stage_object(const StageTimes& t) {
  json::Json o = json::Json::object();
  for (int s = 0; s < kNumStages; ++s) o[stage_name(s)] = t[static_cast<size_t>(s)];
  return o;
}

// The indexer's and attention's time over both row kinds.
double indexer_ms(const StageTimes& t) { return t[kStageIndexerDecode] + t[kStageIndexerPrefill]; }
double attention_ms(const StageTimes& t) {
  return t[kStageAttentionDecode] + t[kStageAttentionPrefill];
}

// The same from a report's stage_ms. Reports written before the stages were split by row kind
// have one indexer_topk and one attention stage instead; a report has one set or the other, so
// the sum over both reads either.
double indexer_ms(const json::Json& stages) {
  return num(stages, "indexer_decode") + num(stages, "indexer_prefill") +
         num(stages, "indexer_topk");
}
double attention_ms(const json::Json& stages) {
  return num(stages, "attention_decode") + num(stages, "attention_prefill") +
         num(stages, "attention");
}

StageTimes stage_totals(const RunResult& r) {
  StageTimes t{};
  for (const auto& s : r.steps) {
    for (int i = 0; i < kNumStages; ++i)
      t[static_cast<size_t>(i)] += s.stages[static_cast<size_t>(i)];
  }
  return t;
}

json::Json run_totals(const RunResult& r) {
  json::Json o = json::Json::object();
  const double clock = r.wall_s > 0.0 ? r.wall_s : 1e-9;
  o["wall_s"] = r.wall_s;
  o["busy_s"] = r.busy_s;
  o["idle_skipped_s"] = r.idle_skipped_s;
  o["steps"] = static_cast<int64_t>(r.steps.size());
  o["requests_per_s"] = static_cast<double>(r.requests.size()) / clock;
  o["output_tokens_per_s"] = static_cast<double>(r.output_tokens) / clock;
  o["processed_tokens_per_s"] = static_cast<double>(r.processed_tokens) / clock;
  std::vector<double> lat;
  for (const auto& s : r.steps) lat.push_back(s.latency_ms);
  o["step_latency_ms"] = distribution(lat);
  o["stage_ms"] = stage_object(stage_totals(r));
  return o;
}

const char* dtype_label(DType t) { return t == DType::kE4M3 ? "fp8" : "bf16"; }

}  // namespace

json::Json distribution(std::vector<double> v) {
  json::Json o = json::Json::object();
  o["count"] = static_cast<int64_t>(v.size());
  if (v.empty()) return o;
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
  };
  double sum = 0.0;
  for (double x : v) sum += x;
  o["p50"] = rank(0.50);
  o["p90"] = rank(0.90);
  o["p99"] = rank(0.99);
  o["min"] = v.front();
  o["max"] = v.back();
  o["mean"] = sum / static_cast<double>(v.size());
  return o;
}

json::Json build_report(const ReportContext& c, const RunResult& r, const RunResult* dense) {
  json::Json rep = json::Json::object();
  rep["schema"] = "msa-run-report/1";
  rep["msa_version"] = version_string();
  rep["command"] = c.command;
  rep["backend"] = c.backend;
  rep["device"] = c.device;
  rep["threads"] = c.threads;
  rep["seed"] = static_cast<int64_t>(c.seed);

  int dense_layers = 0, compute_layers = 0, reuse_layers = 0;
  for (LayerKind k : r.plan) {
    dense_layers += k == LayerKind::kDense;
    compute_layers += k == LayerKind::kSparseCompute;
    reuse_layers += k == LayerKind::kSparseReuse;
  }
  json::Json model = json::Json::object();
  model["preset"] = c.preset;
  model["layers"] = c.model.num_layers;
  model["dense_layers"] = dense_layers;
  model["sparse_layers"] = compute_layers + reuse_layers;
  model["topk_compute_layers"] = compute_layers;
  model["topk_reuse_layers"] = reuse_layers;
  model["tp_size"] = c.shape.tp_size;
  model["q_heads"] = c.shape.num_q_heads;
  model["kv_heads"] = c.shape.num_kv_heads;
  model["index_heads"] = c.shape.num_index_heads;
  model["head_dim"] = c.shape.head_dim;
  model["index_dim"] = c.shape.index_dim;
  model["block_size"] = c.model.sparse_block_size;
  model["topk_blocks"] = c.model.sparse_topk_blocks;
  model["topk_freq"] = c.model.use_index_cache ? c.model.index_topk_freq : 1;
  model["kv_dtype"] = dtype_label(c.kv_dtype);
  model["index_dtype"] = dtype_label(c.index_dtype);
  rep["model"] = std::move(model);

  json::Json eng = json::Json::object();
  eng["max_batch_tokens"] = c.max_batch_tokens;
  eng["kv_blocks"] = c.kv_blocks;
  eng["spec_tokens"] = c.spec_tokens;
  eng["spec_accept"] = c.spec_accept;
  eng["batch_invariant"] = c.batch_invariant;
  eng["device_bytes"] = static_cast<int64_t>(r.device_bytes);
  rep["engine"] = std::move(eng);

  json::Json wl = json::Json::object();
  wl["source"] = c.workload_source;
  wl["requests"] = static_cast<int64_t>(r.requests.size());
  wl["prompt_tokens"] = r.prompt_tokens;
  wl["output_tokens"] = r.output_tokens;
  wl["arrival_rate"] = c.arrival_rate;
  rep["workload"] = std::move(wl);

  json::Json sum = run_totals(r);
  std::vector<double> ttft, latency;
  for (const auto& q : r.requests) {
    ttft.push_back(q.ttft_s);
    latency.push_back(q.latency_s);
  }
  sum["ttft_s"] = distribution(ttft);
  sum["request_latency_s"] = distribution(latency);
  json::Json kv = json::Json::object();
  kv["pool_blocks"] = r.pool_blocks;
  kv["peak_blocks"] = r.peak_kv_blocks;
  kv["peak_fraction"] =
      r.pool_blocks > 0 ? static_cast<double>(r.peak_kv_blocks) / r.pool_blocks : 0.0;
  kv["index_peak_blocks"] = r.peak_index_blocks;
  kv["blocks_in_use_at_end"] = r.blocks_in_use_at_end;
  sum["kv_cache"] = std::move(kv);
  sum["preemptions"] = r.preemptions;
  sum["recomputed_tokens"] = r.recomputed_tokens;
  json::Json spec = json::Json::object();
  spec["draft_tokens_proposed"] = r.draft_proposed;
  spec["draft_tokens_accepted"] = r.draft_accepted;
  spec["acceptance_rate"] =
      r.draft_proposed > 0 ? static_cast<double>(r.draft_accepted) / r.draft_proposed : 0.0;
  sum["speculative"] = std::move(spec);
  if (c.topk_union) {
    const TopkUnion& u = r.topk_union;
    json::Json tu = json::Json::object();
    tu["rows"] = u.rows;
    tu["mean_selected"] = u.rows > 0 ? static_cast<double>(u.selected) / u.rows : 0.0;
    json::Json windows = json::Json::array();
    for (int w = 0; w < kUnionWindowCount; ++w) {
      json::Json o = json::Json::object();
      o["positions"] = kUnionWindows[w];
      o["windows"] = u.windows[w];
      o["mean_blocks"] = u.windows[w] > 0 ? static_cast<double>(u.blocks[w]) / u.windows[w] : 0.0;
      windows.push_back(std::move(o));
    }
    tu["windows"] = std::move(windows);
    sum["topk_union"] = std::move(tu);
  }
  rep["summary"] = std::move(sum);

  json::Json reqs = json::Json::array();
  for (const auto& q : r.requests) {
    json::Json o = json::Json::object();
    o["id"] = q.id;
    o["arrival_s"] = q.arrival_s;
    o["prompt_tokens"] = q.prompt_tokens;
    o["output_tokens"] = q.output_tokens;
    o["preemptions"] = q.preemptions;
    o["recomputed_tokens"] = q.recomputed_tokens;
    o["ttft_s"] = q.ttft_s;
    o["latency_s"] = q.latency_s;
    o["checksum"] = hex64(q.checksum);
    reqs.push_back(std::move(o));
  }
  rep["requests"] = std::move(reqs);

  json::Json steps = json::Json::array();
  for (const auto& s : r.steps) {
    json::Json o = json::Json::object();
    o["step"] = s.step;
    o["start_s"] = s.start_s;
    o["tokens"] = s.tokens;
    o["decode_requests"] = s.decode_requests;
    o["prefill_requests"] = s.prefill_requests;
    o["decode_tokens"] = s.decode_tokens;
    o["prefill_tokens"] = s.prefill_tokens;
    o["output_tokens"] = s.output_tokens;
    o["max_context"] = s.max_context;
    o["latency_ms"] = s.latency_ms;
    o["kv_blocks_used"] = s.kv_blocks_used;
    o["stage_ms"] = stage_object(s.stages);
    steps.push_back(std::move(o));
  }
  rep["steps"] = std::move(steps);

  if (dense != nullptr) {
    json::Json cmp = json::Json::object();
    cmp["dense"] = run_totals(*dense);
    const StageTimes st = stage_totals(r);
    const StageTimes dt = stage_totals(*dense);
    // Readback holds the fidelity sampling, which only the sparse run does: leave it out.
    const double sparse_work = r.busy_s - st[kStageReadback] / 1e3;
    const double dense_work = dense->busy_s - dt[kStageReadback] / 1e3;
    cmp["speedup"] = sparse_work > 0.0 ? dense_work / sparse_work : 0.0;
    const double sparse_attn = attention_ms(st) + indexer_ms(st);
    cmp["attention_speedup"] =
        sparse_attn > 0.0 ? (attention_ms(dt) + indexer_ms(dt)) / sparse_attn : 0.0;
    json::Json fid = json::Json::object();
    fid["method"] =
        "host fp64 dense softmax over every causal key for sampled rows (one sparse layer "
        "per step, cycling; rows whose context exceeds topk_blocks * block_size), compared "
        "with the sparse attention output of the same run";
    std::vector<double> err, mass;
    std::vector<int> layers;
    for (const auto& f : r.samples) {
      err.push_back(f.rel_error);
      mass.push_back(f.selected_mass);
      if (std::find(layers.begin(), layers.end(), f.layer) == layers.end()) {
        layers.push_back(f.layer);
      }
    }
    fid["rows_sampled"] = static_cast<int64_t>(r.samples.size());
    fid["layers_sampled"] = static_cast<int64_t>(layers.size());
    fid["rel_error"] = distribution(err);
    fid["selected_mass"] = distribution(mass);
    json::Json samples = json::Json::array();
    for (const auto& f : r.samples) {
      json::Json o = json::Json::object();
      o["layer"] = f.layer;
      o["position"] = f.position;
      o["rel_error"] = f.rel_error;
      o["selected_mass"] = f.selected_mass;
      samples.push_back(std::move(o));
    }
    fid["samples"] = std::move(samples);
    cmp["fidelity"] = std::move(fid);
    rep["compare_dense"] = std::move(cmp);
  }
  return rep;
}

// Why a --compare-dense run found sparse slower than dense. Sparse attention reads at most
// topk_blocks * block_size keys a row; below that context it reads what dense reads and the
// indexer is pure cost, and above it the indexer's O(context) scan costs less than the
// attention it saves only from some context on (docs/engine.md: the measured crossover).
std::string slower_note(const json::Json& rep, const json::Json& cmp) {
  const json::Json& m = member(rep, "model");
  const json::Json& st = member(member(rep, "summary"), "stage_ms");
  const json::Json& dt = member(member(cmp, "dense"), "stage_ms");
  int64_t context = 0;
  const json::Json* steps = json::find(rep, "steps");
  if (steps != nullptr && steps->is_array()) {
    for (const json::Json& step : *steps) context = std::max(context, ival(step, "max_context"));
  }
  const int64_t keys = ival(m, "topk_blocks") * ival(m, "block_size");
  const double indexer = indexer_ms(st);
  const double saved = attention_ms(dt) - attention_ms(st);
  std::ostringstream os;
  os << "  why slower  ";
  if (indexer >= saved) {
    os << "short contexts: the indexer+top-k (" << fmt("%.0f ms", indexer)
       << ") costs more than the attention it saves (" << fmt("%.0f ms", saved) << ");\n"
       << "              top-k keeps " << keys << " keys a row and contexts here reach " << context
       << " tokens; sparse gains with longer contexts (docs/engine.md)\n";
  } else {
    os << "the indexer+top-k (" << fmt("%.0f ms", indexer)
       << ") costs less than the attention it saves (" << fmt("%.0f ms", saved) << "), but\n"
       << "              the sparse layers' other work (index-key inserts) and timing noise "
          "outweigh the gain\n";
  }
  return os.str();
}

std::string format_summary(const json::Json& rep) {
  std::ostringstream os;
  const json::Json& m = member(rep, "model");
  const json::Json& w = member(rep, "workload");
  const json::Json& s = member(rep, "summary");
  const json::Json& lat = member(s, "step_latency_ms");
  const json::Json& kv = member(s, "kv_cache");
  os << "msa run: " << str(m, "preset") << ", " << ival(m, "layers") << " layers ("
     << ival(m, "dense_layers") << " dense, " << ival(m, "sparse_layers") << " sparse, "
     << ival(m, "topk_compute_layers") << " computing top-k), " << ival(m, "q_heads") << "q/"
     << ival(m, "kv_heads") << "kv heads, KV " << str(m, "kv_dtype") << ", index "
     << str(m, "index_dtype") << ", backend " << str(rep, "backend") << " (" << str(rep, "device")
     << ")" << (flag(member(rep, "engine"), "batch_invariant") ? ", batch-invariant" : "") << "\n";
  os << "  workload    " << ival(w, "requests") << " requests, " << ival(w, "prompt_tokens")
     << " prompt + " << ival(w, "output_tokens") << " output tokens\n";
  os << "  time        " << fmt("%.2f s", num(s, "wall_s")) << " (" << ival(s, "steps")
     << " steps)\n";
  os << "  throughput  " << fmt("%.2f requests/s, ", num(s, "requests_per_s"))
     << fmt("%.1f output tokens/s, ", num(s, "output_tokens_per_s"))
     << fmt("%.1f processed tokens/s\n", num(s, "processed_tokens_per_s"));
  os << "  step        p50 " << fmt("%.2f", num(lat, "p50")) << " ms, p90 "
     << fmt("%.2f", num(lat, "p90")) << " ms, p99 " << fmt("%.2f", num(lat, "p99")) << " ms\n";
  const json::Json& stages = member(s, "stage_ms");
  double total = 0.0;
  for (const auto& kvp : stages.items())
    total += kvp.value().is_number() ? kvp.value().get<double>() : 0.0;
  os << "  stages      ";
  // Model work first, then the engine's own. A report shows the stages it was written with:
  // indexer_topk and attention are those of reports from before the split by row kind, and a
  // stage this table does not know is shown by its name alone.
  static const char* const kLabels[][2] = {
      {"insert", "fused norm/rope/KV insert"},
      {"indexer_decode", "index scores + top-k, decode rows"},
      {"indexer_prefill", "index scores + top-k, prefill rows"},
      {"attention_decode", "attention, decode rows"},
      {"attention_prefill", "attention, prefill rows"},
      {"indexer_topk", "index scores + top-k, decode + prefill rows"},
      {"attention", "attention, decode + prefill rows"},
      {"metadata", "batch metadata"},
      {"activations", "synthetic inputs"},
      {"readback", "digests/readback"}};
  std::vector<std::pair<std::string, std::string>> rows;
  std::set<std::string> labelled;
  for (const auto& l : kLabels) {
    labelled.insert(l[0]);
    if (json::find(stages, l[0]) != nullptr) rows.emplace_back(l[0], l[1]);
  }
  for (const auto& kvp : stages.items()) {
    if (labelled.count(kvp.key()) == 0) rows.emplace_back(kvp.key(), "");
  }
  bool first = true;
  for (const auto& row : rows) {
    const double ms = num(stages, row.first);
    if (!first) os << "\n              ";
    first = false;
    os << fmt("%9.1f ms ", ms) << fmt("%5.1f%%  ", total > 0 ? 100.0 * ms / total : 0.0)
       << row.first;
    // Descriptions start in one column (every labelled name is shorter than 19 characters).
    if (!row.second.empty()) os << std::string(19 - row.first.size(), ' ') << row.second;
  }
  os << "\n";
  os << "  KV cache    peak " << ival(kv, "peak_blocks") << " / " << ival(kv, "pool_blocks")
     << fmt(" blocks (%.0f%%)", 100.0 * num(kv, "peak_fraction")) << ", preemptions "
     << ival(s, "preemptions") << " (" << ival(s, "recomputed_tokens") << " tokens recomputed)\n";
  const json::Json& spec = member(s, "speculative");
  if (num(spec, "draft_tokens_proposed") > 0) {
    os << "  speculative " << ival(spec, "draft_tokens_accepted") << " / "
       << ival(spec, "draft_tokens_proposed")
       << fmt(" drafts accepted (%.2f)\n", num(spec, "acceptance_rate"));
  }
  const json::Json* tu = json::find(s, "topk_union");
  if (tu != nullptr) {
    os << "  top-k union " << fmt("%.1f", num(*tu, "mean_selected"))
       << " blocks a prefill row; distinct blocks of aligned windows of";
    const json::Json& windows = member(*tu, "windows");
    for (size_t i = 0; i < windows.size(); ++i) {
      os << (i == 0 ? " " : ", ") << ival(windows[i], "positions") << " positions "
         << fmt("%.1f", num(windows[i], "mean_blocks"));
    }
    os << " (" << ival(*tu, "rows") << " rows)\n";
  }
  const json::Json* cmp = json::find(rep, "compare_dense");
  if (cmp != nullptr) {
    const json::Json& fid = member(*cmp, "fidelity");
    const json::Json& err = member(fid, "rel_error");
    const json::Json& mass = member(fid, "selected_mass");
    os << "  vs dense    speed-up (dense time / sparse time) "
       << fmt("%.2fx per step, ", num(*cmp, "speedup"))
       << fmt("%.2fx in attention (sparse: attention + indexer)\n", num(*cmp, "attention_speedup"));
    if (num(*cmp, "speedup") < 1.0) os << slower_note(rep, *cmp);
    if (num(fid, "rows_sampled") > 0) {
      os << "  fidelity    " << ival(fid, "rows_sampled") << " rows: rel. error p50 "
         << fmt("%.2e", num(err, "p50")) << ", p90 " << fmt("%.2e", num(err, "p90")) << ", p99 "
         << fmt("%.2e", num(err, "p99")) << "; selected mass p50 " << fmt("%.3f", num(mass, "p50"))
         << ", min " << fmt("%.3f", num(mass, "min")) << "\n";
    } else {
      os << "  fidelity    no row had a context beyond top-k coverage (sparse == dense)\n";
    }
  }
  return os.str();
}

namespace {

// Field checks of validate_report: `where` is the dotted path of `obj`.
class ReportShape {
 public:
  Status status() const { return status_; }

  const json::Json& object(const json::Json& parent, const std::string& where,
                           const std::string& key) {
    const json::Json* v = field(parent, where, key);
    if (v != nullptr && !v->is_object()) fail(where, key, "an object");
    return v != nullptr && v->is_object() ? *v : null_;
  }
  const json::Json* array(const json::Json& parent, const std::string& where,
                          const std::string& key) {
    const json::Json* v = field(parent, where, key);
    if (v != nullptr && !v->is_array()) fail(where, key, "an array");
    return v != nullptr && v->is_array() ? v : nullptr;
  }
  void string(const json::Json& parent, const std::string& where, const std::string& key) {
    const json::Json* v = field(parent, where, key);
    if (v != nullptr && !v->is_string()) fail(where, key, "a string");
  }
  // Numbers the report writes may be null (NaN and infinities print as null).
  void number(const json::Json& parent, const std::string& where, const std::string& key) {
    const json::Json* v = field(parent, where, key);
    if (v != nullptr && !v->is_number() && !v->is_null()) fail(where, key, "a number");
  }
  void integer(const json::Json& parent, const std::string& where, const std::string& key) {
    const json::Json* v = field(parent, where, key);
    int64_t i = 0;
    if (v != nullptr && !json::exact_int(*v, &i)) fail(where, key, "an integer");
  }
  // An array of objects at `key`: each element, named where.key.i, must be an object, and
  // each(element, name) checks its members.
  template <typename Each>
  void objects(const json::Json& parent, const std::string& where, const std::string& key,
               Each&& each) {
    const json::Json* a = array(parent, where, key);
    for (size_t i = 0; a != nullptr && i < a->size() && status_.ok(); ++i) {
      const std::string at = where + "." + key + "." + std::to_string(i);
      if (!(*a)[i].is_object()) {
        status_ =
            Status(StatusCode::kParseError, "not an msa run report: '" + at + "' is no object");
        return;
      }
      each((*a)[i], at);
    }
  }
  // A distribution(): count, and p50..mean when count > 0.
  void distribution(const json::Json& parent, const std::string& where, const std::string& key) {
    const json::Json& d = object(parent, where, key);
    const std::string at = where + "." + key;
    integer(d, at, "count");
    const json::Json* count = json::find(d, "count");
    int64_t n = 0;
    if (count == nullptr || !json::exact_int(*count, &n) || n == 0) return;
    for (const char* k : {"p50", "p90", "p99", "min", "max", "mean"}) number(d, at, k);
  }

 private:
  const json::Json* field(const json::Json& parent, const std::string& where,
                          const std::string& key) {
    if (!status_.ok()) return nullptr;
    const json::Json* v = json::find(parent, key);
    if (v == nullptr) {
      status_ = Status(StatusCode::kParseError,
                       "not an msa run report: '" + where + "." + key + "' is missing");
    }
    return v;
  }
  void fail(const std::string& where, const std::string& key, const char* expected) {
    if (status_.ok()) {
      status_ = Status(StatusCode::kParseError,
                       "not an msa run report: '" + where + "." + key + "' is not " + expected);
    }
  }

  Status status_;
  json::Json null_;
};

Status io_error(const std::string& msg) { return Status(StatusCode::kIoError, msg); }

std::string errno_text() { return std::strerror(errno); }

// The directory part of `path` ("." when it has none).
std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// An existing entry at `path` must be a regular file (never followed if it is a link).
Status check_not_special(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return io_error("'" + path + "': " + errno_text());
  }
  if (!S_ISREG(st.st_mode)) {
    const char* what = S_ISLNK(st.st_mode)    ? "a symbolic link"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                                              : "not a regular file";
    return io_error("'" + path + "' is " + what + "; refusing to replace it");
  }
  return Status::Ok();
}

// Creates path.tmp.XXXXXX exclusively (O_EXCL: never follows or reuses an existing entry);
// *fd is its descriptor, *tmp its name.
Status create_temporary(const std::string& path, int* fd, std::string* tmp) {
  std::string name = path + ".tmp.XXXXXX";
  *fd = mkstemp(&name[0]);
  if (*fd < 0) return io_error("cannot create a file beside '" + path + "': " + errno_text());
  *tmp = name;
  return Status::Ok();
}

}  // namespace

Status validate_report(const json::Json& rep) {
  if (!rep.is_object()) {
    return Status(StatusCode::kParseError, "not an msa run report: the top level is no object");
  }
  const json::Json* schema = json::find(rep, "schema");
  if (schema == nullptr || !schema->is_string() ||
      schema->get<std::string>() != "msa-run-report/1") {
    return Status(StatusCode::kParseError,
                  "not an msa run report: 'schema' is not \"msa-run-report/1\"");
  }
  ReportShape r;
  const std::string top = "report";
  r.string(rep, top, "backend");
  r.string(rep, top, "device");
  const json::Json& m = r.object(rep, top, "model");
  r.string(m, "model", "preset");
  for (const char* k :
       {"layers", "dense_layers", "sparse_layers", "topk_compute_layers", "q_heads", "kv_heads"}) {
    r.integer(m, "model", k);
  }
  r.string(m, "model", "kv_dtype");
  r.string(m, "model", "index_dtype");
  const json::Json& w = r.object(rep, top, "workload");
  for (const char* k : {"requests", "prompt_tokens", "output_tokens"}) r.integer(w, "workload", k);
  const json::Json& sum = r.object(rep, top, "summary");
  for (const char* k :
       {"wall_s", "requests_per_s", "output_tokens_per_s", "processed_tokens_per_s"}) {
    r.number(sum, "summary", k);
  }
  for (const char* k : {"steps", "preemptions", "recomputed_tokens"}) r.integer(sum, "summary", k);
  r.distribution(sum, "summary", "step_latency_ms");
  const json::Json& stages = r.object(sum, "summary", "stage_ms");
  for (const auto& kv : stages.items()) r.number(stages, "summary.stage_ms", kv.key());
  const json::Json& kv = r.object(sum, "summary", "kv_cache");
  r.integer(kv, "summary.kv_cache", "peak_blocks");
  r.integer(kv, "summary.kv_cache", "pool_blocks");
  r.number(kv, "summary.kv_cache", "peak_fraction");
  const json::Json& spec = r.object(sum, "summary", "speculative");
  r.integer(spec, "summary.speculative", "draft_tokens_proposed");
  r.integer(spec, "summary.speculative", "draft_tokens_accepted");
  r.number(spec, "summary.speculative", "acceptance_rate");
  if (json::find(sum, "topk_union") != nullptr) {
    const json::Json& tu = r.object(sum, "summary", "topk_union");
    r.integer(tu, "summary.topk_union", "rows");
    r.number(tu, "summary.topk_union", "mean_selected");
    r.objects(tu, "summary.topk_union", "windows", [&](const json::Json& o, const std::string& at) {
      r.integer(o, at, "positions");
      r.number(o, at, "mean_blocks");
    });
  }
  r.objects(rep, top, "steps", [&](const json::Json& o, const std::string& at) {
    for (const char* k : {"max_context", "latency_ms", "prefill_tokens"}) r.number(o, at, k);
  });
  if (json::find(rep, "compare_dense") != nullptr) {
    const json::Json& cmp = r.object(rep, top, "compare_dense");
    r.number(cmp, "compare_dense", "speedup");
    r.number(cmp, "compare_dense", "attention_speedup");
    const json::Json& fid = r.object(cmp, "compare_dense", "fidelity");
    r.integer(fid, "compare_dense.fidelity", "rows_sampled");
    r.distribution(fid, "compare_dense.fidelity", "rel_error");
    r.distribution(fid, "compare_dense.fidelity", "selected_mass");
  }
  return r.status();
}

Status check_output_path(const std::string& path) {
  if (path.empty()) return io_error("empty output path");
  if (path.back() == '/') return io_error("'" + path + "' names a directory, not a file");
  MSA_ENGINE_RETURN_IF_ERROR(check_not_special(path));
  struct stat st {};
  const std::string dir = directory_of(path);
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return io_error("'" + path + "': directory '" + dir + "' does not exist");
  }
  // Proves the directory takes a new file; the probe is removed at once.
  int fd = -1;
  std::string tmp;
  MSA_ENGINE_RETURN_IF_ERROR(create_temporary(path, &fd, &tmp));
  close(fd);
  unlink(tmp.c_str());
  return Status::Ok();
}

Status write_file_atomic(const std::string& path, const std::string& data) {
  MSA_ENGINE_RETURN_IF_ERROR(check_output_path(path));
  int fd = -1;
  std::string tmp;
  MSA_ENGINE_RETURN_IF_ERROR(create_temporary(path, &fd, &tmp));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = errno_text();
      close(fd);
      unlink(tmp.c_str());
      return io_error("cannot write '" + tmp + "': " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    const std::string why = errno_text();
    unlink(tmp.c_str());
    return io_error("cannot write '" + tmp + "': " + why);
  }
  // The path may have become a special file while the data was produced.
  Status s = check_not_special(path);
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = io_error("cannot rename '" + tmp + "' to '" + path + "': " + errno_text());
  }
  if (!s.ok()) unlink(tmp.c_str());
  return s;
}

Status read_file(const std::string& path, std::string* data) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status(StatusCode::kIoError, "cannot open '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  *data = ss.str();
  return Status::Ok();
}

}  // namespace engine
}  // namespace msa
