#include "engine/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/json.h"
#include "engine/synth.h"

namespace msa {
namespace engine {
namespace {

constexpr uint64_t kTagPrompt = 101;
constexpr uint64_t kTagOutput = 102;
constexpr uint64_t kTagArrival = 103;

int64_t uniform_int(uint64_t h, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(h % static_cast<uint64_t>(hi - lo + 1));
}

Status invalid(const std::string& msg) { return Status(StatusCode::kInvalidArgument, msg); }

}  // namespace

Status generate_workload(const WorkloadOptions& o, std::vector<RequestSpec>* out) {
  if (o.num_requests < 1) return invalid("--requests: expected at least 1");
  if (o.prompt_min < 1 || o.prompt_max < o.prompt_min) {
    return invalid("--prompt-len: expected 1 <= MIN <= MAX");
  }
  if (o.output_min < 1 || o.output_max < o.output_min) {
    return invalid("--output-len: expected 1 <= MIN <= MAX");
  }
  if (!(o.arrival_rate >= 0.0) || !std::isfinite(o.arrival_rate)) {
    return invalid("--arrival-rate: expected a finite value >= 0");
  }
  std::vector<RequestSpec> reqs;
  double t = 0.0;
  for (int i = 0; i < o.num_requests; ++i) {
    const auto id = static_cast<uint64_t>(i);
    RequestSpec r;
    r.id = i;
    r.prompt_tokens = uniform_int(synth::hash(o.seed, kTagPrompt, id), o.prompt_min, o.prompt_max);
    r.output_tokens = uniform_int(synth::hash(o.seed, kTagOutput, id), o.output_min, o.output_max);
    if (o.arrival_rate > 0.0 && i > 0) {
      // Inverse-CDF exponential gap; 1 - u is in (0, 1].
      const double u = synth::unit_uniform(synth::hash(o.seed, kTagArrival, id));
      t += -std::log(1.0 - u) / o.arrival_rate;
    }
    r.arrival_s = t;
    reqs.push_back(r);
  }
  *out = std::move(reqs);
  return Status::Ok();
}

Status parse_trace(const std::string& text, std::vector<RequestSpec>* out) {
  std::vector<RequestSpec> reqs;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "trace line " + std::to_string(line_no) + ": ";
    json::Json v;
    Status s = json::parse(line, &v);
    if (!s.ok()) return Status(StatusCode::kParseError, where + s.message());
    if (!v.is_object()) return Status(StatusCode::kParseError, where + "expected an object");
    RequestSpec r;
    r.id = static_cast<int64_t>(reqs.size());
    const auto arrival = v.find("arrival_s");
    if (arrival != v.end()) {
      if (!arrival->is_number() || !(arrival->get<double>() >= 0.0)) {
        return Status(StatusCode::kParseError, where + "arrival_s: expected a number >= 0");
      }
      r.arrival_s = arrival->get<double>();
    }
    // A token count: an integer in [1, kMaxRequestTokens], or 0 when the key is absent or wrong.
    auto count = [&](const char* key) -> int64_t {
      const auto it = v.find(key);
      int64_t n = 0;
      if (it == v.end() || !json::exact_int(*it, &n) || n < 1 || n > kMaxRequestTokens) return 0;
      return n;
    };
    r.prompt_tokens = count("prompt_tokens");
    r.output_tokens = count("output_tokens");
    if (r.prompt_tokens == 0) {
      return Status(StatusCode::kParseError,
                    where + "prompt_tokens: expected an integer in [1, 2^31 - 1]");
    }
    if (r.output_tokens == 0) {
      return Status(StatusCode::kParseError,
                    where + "output_tokens: expected an integer in [1, 2^31 - 1]");
    }
    reqs.push_back(r);
  }
  if (reqs.empty()) return Status(StatusCode::kParseError, "trace: no requests");
  std::stable_sort(reqs.begin(), reqs.end(), [](const RequestSpec& a, const RequestSpec& b) {
    return a.arrival_s < b.arrival_s;
  });
  *out = std::move(reqs);
  return Status::Ok();
}

Status load_trace(const std::string& path, std::vector<RequestSpec>* out) {
  std::ifstream f(path);
  if (!f) return Status(StatusCode::kIoError, "--trace: cannot open '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_trace(ss.str(), out);
}

}  // namespace engine
}  // namespace msa
