#include "msa/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/json.h"
#include "core/validate.h"

namespace msa {

using detail::invalid;

namespace {

// Layers [0, kM3DenseLayers) are dense in the MiniMax-M3 pattern (spec A1).
constexpr int kM3DenseLayers = 3;

Status parse_error(const std::string& msg) { return Status(StatusCode::kParseError, msg); }

// The object the keys are read from (the top level or text_config), and where its keys are.
struct Keys {
  const json::Json& obj;
  std::string pointer;  // JSON pointer of obj ("" or "/text_config")
  const json::KeyLines& lines;

  // The key's value, or nullptr when it is absent or a JSON null (which Hugging Face configs use
  // for "unset"): absent keys keep their defaults.
  const json::Json* find(const std::string& key) const {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  // "config key 'head_dim' (line 12)"
  std::string name(const std::string& key) const {
    const auto it = lines.find(pointer + "/" + key);
    return "config key '" + key + "'" +
           (it == lines.end() ? "" : " (line " + std::to_string(it->second) + ")");
  }
  Status wrong_type(const std::string& key, const char* expected, const json::Json& v) const {
    return parse_error(name(key) + ": expected " + expected + ", got " + json::type_name(v));
  }
};

Status read_int(const Keys& c, const std::string& key, int* out) {
  const json::Json* v = c.find(key);
  if (v == nullptr) return Status::Ok();
  int64_t i = 0;
  if (!json::exact_int(*v, &i) || i < std::numeric_limits<int>::min() ||
      i > std::numeric_limits<int>::max()) {
    return c.wrong_type(key, "an integer in the 32-bit range", *v);
  }
  *out = static_cast<int>(i);
  return Status::Ok();
}

Status read_double(const Keys& c, const std::string& key, double* out) {
  const json::Json* v = c.find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return c.wrong_type(key, "a number", *v);
  *out = v->get<double>();
  return Status::Ok();
}

Status read_bool(const Keys& c, const std::string& key, bool* out) {
  const json::Json* v = c.find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return c.wrong_type(key, "a boolean", *v);
  *out = v->get<bool>();
  return Status::Ok();
}

// sparse_attention_freq: one 0/1 (or boolean) entry per layer, 1 = sparse.
Status read_layer_pattern(const Keys& c, const std::string& key, std::vector<bool>* out) {
  const json::Json* v = c.find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return c.wrong_type(key, "an array of 0/1 per layer", *v);
  std::vector<bool> layers;
  for (size_t i = 0; i < v->size(); ++i) {
    const json::Json& e = (*v)[i];
    int64_t bit = -1;
    if (e.is_boolean()) {
      layers.push_back(e.get<bool>());
    } else if (json::exact_int(e, &bit) && (bit == 0 || bit == 1)) {
      layers.push_back(bit == 1);
    } else {
      return parse_error(c.name(key) + ": element " + std::to_string(i) + " must be 0 or 1, got " +
                         json::dump(e));
    }
  }
  *out = std::move(layers);
  return Status::Ok();
}

Status require_positive(int value, const char* name) {
  if (value <= 0) {
    return invalid(std::string("config.") + name + ": " + std::to_string(value) +
                   ", expected a positive value");
  }
  return Status::Ok();
}

}  // namespace

ModelConfig ModelConfig::minimax_m3() { return ModelConfig(); }

float ModelConfig::effective_softmax_scale() const {
  if (softmax_scale > 0.0) return static_cast<float>(softmax_scale);
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

bool ModelConfig::is_sparse_layer(int layer) const {
  if (layer < 0 || layer >= num_layers) return false;
  if (sparse_layers.empty()) return layer >= kM3DenseLayers;
  return static_cast<size_t>(layer) < sparse_layers.size() &&
         sparse_layers[static_cast<size_t>(layer)];
}

Status ModelConfig::validate() const {
  MSA_RETURN_IF_ERROR(require_positive(hidden_size, "hidden_size"));
  MSA_RETURN_IF_ERROR(require_positive(num_layers, "num_layers"));
  MSA_RETURN_IF_ERROR(require_positive(num_q_heads, "num_q_heads"));
  MSA_RETURN_IF_ERROR(require_positive(num_kv_heads, "num_kv_heads"));
  MSA_RETURN_IF_ERROR(require_positive(head_dim, "head_dim"));
  MSA_RETURN_IF_ERROR(require_positive(rotary_dim, "rotary_dim"));
  MSA_RETURN_IF_ERROR(require_positive(max_position_embeddings, "max_position_embeddings"));
  MSA_RETURN_IF_ERROR(require_positive(sparse_block_size, "sparse_block_size"));
  MSA_RETURN_IF_ERROR(require_positive(sparse_topk_blocks, "sparse_topk_blocks"));
  MSA_RETURN_IF_ERROR(require_positive(sparse_num_index_heads, "sparse_num_index_heads"));
  MSA_RETURN_IF_ERROR(require_positive(sparse_index_dim, "sparse_index_dim"));
  MSA_RETURN_IF_ERROR(require_positive(index_topk_freq, "index_topk_freq"));
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim) {
    return invalid("config.rotary_dim: " + std::to_string(rotary_dim) +
                   ", expected an even value <= head_dim = " + std::to_string(head_dim));
  }
  if (num_q_heads % num_kv_heads != 0) {
    return invalid("config.num_q_heads: " + std::to_string(num_q_heads) +
                   " is not a multiple of num_kv_heads = " + std::to_string(num_kv_heads));
  }
  if (sparse_num_index_heads != num_kv_heads) {
    return invalid("config.sparse_num_index_heads: " + std::to_string(sparse_num_index_heads) +
                   ", expected num_kv_heads = " + std::to_string(num_kv_heads) +
                   " (one index head per KV head)");
  }
  if (!(rope_theta > 0.0) || !std::isfinite(rope_theta)) {
    return invalid("config.rope_theta: expected a positive finite value");
  }
  if (!(rms_norm_eps > 0.0) || !std::isfinite(rms_norm_eps)) {
    return invalid("config.rms_norm_eps: expected a positive finite value");
  }
  if (!(softmax_scale >= 0.0) || !std::isfinite(softmax_scale)) {
    return invalid("config.softmax_scale: expected 0 (= head_dim^-0.5) or a positive value");
  }
  if (sparse_init_blocks < 0 || sparse_local_blocks < 0 ||
      sparse_init_blocks + sparse_local_blocks > sparse_topk_blocks) {
    return invalid(
        "config.sparse_init_blocks / sparse_local_blocks: " + std::to_string(sparse_init_blocks) +
        " / " + std::to_string(sparse_local_blocks) +
        ", expected non-negative counts whose sum is <= sparse_topk_blocks = " +
        std::to_string(sparse_topk_blocks));
  }
  if (!sparse_layers.empty() && sparse_layers.size() != static_cast<size_t>(num_layers)) {
    return invalid("config.sparse_layers: " + std::to_string(sparse_layers.size()) +
                   " entries, expected num_layers = " + std::to_string(num_layers) +
                   " (or none for the MiniMax-M3 pattern)");
  }
  if (index_skip_topk_offset < 0) {
    return invalid("config.index_skip_topk_offset: " + std::to_string(index_skip_topk_offset) +
                   ", expected >= 0");
  }
  return Status::Ok();
}

Status parse_hf_config(const std::string& json_text, ModelConfig* out) {
  if (out == nullptr) return invalid("out: null output pointer");
  json::Json root;
  json::KeyLines lines;
  MSA_RETURN_IF_ERROR(json::parse(json_text, &root, &lines));
  if (!root.is_object()) return parse_error("config: the top level must be a JSON object");
  const Keys top{root, "", lines};
  const json::Json* text = top.find("text_config");
  if (text != nullptr && !text->is_object()) {
    return top.wrong_type("text_config", "an object", *text);
  }
  // The reuse keys (and every other key) are read from text_config only when it exists: the
  // flat form is ignored by the upstream loader too (spec B1).
  const Keys c = text != nullptr ? Keys{*text, "/text_config", lines} : top;

  ModelConfig cfg = ModelConfig::minimax_m3();
  MSA_RETURN_IF_ERROR(read_int(c, "hidden_size", &cfg.hidden_size));
  MSA_RETURN_IF_ERROR(read_int(c, "num_hidden_layers", &cfg.num_layers));
  MSA_RETURN_IF_ERROR(read_int(c, "num_attention_heads", &cfg.num_q_heads));
  MSA_RETURN_IF_ERROR(read_int(c, "num_key_value_heads", &cfg.num_kv_heads));
  MSA_RETURN_IF_ERROR(read_int(c, "head_dim", &cfg.head_dim));
  MSA_RETURN_IF_ERROR(read_double(c, "rope_theta", &cfg.rope_theta));
  MSA_RETURN_IF_ERROR(read_int(c, "max_position_embeddings", &cfg.max_position_embeddings));
  MSA_RETURN_IF_ERROR(read_double(c, "rms_norm_eps", &cfg.rms_norm_eps));
  MSA_RETURN_IF_ERROR(read_int(c, "sparse_block_size", &cfg.sparse_block_size));
  MSA_RETURN_IF_ERROR(read_int(c, "sparse_topk_blocks", &cfg.sparse_topk_blocks));
  MSA_RETURN_IF_ERROR(read_int(c, "sparse_num_index_heads", &cfg.sparse_num_index_heads));
  MSA_RETURN_IF_ERROR(read_int(c, "sparse_index_dim", &cfg.sparse_index_dim));
  MSA_RETURN_IF_ERROR(read_int(c, "sparse_init_block", &cfg.sparse_init_blocks));
  MSA_RETURN_IF_ERROR(read_int(c, "sparse_local_block", &cfg.sparse_local_blocks));
  MSA_RETURN_IF_ERROR(read_layer_pattern(c, "sparse_attention_freq", &cfg.sparse_layers));
  MSA_RETURN_IF_ERROR(read_bool(c, "use_index_cache", &cfg.use_index_cache));
  MSA_RETURN_IF_ERROR(read_int(c, "index_topk_freq", &cfg.index_topk_freq));
  MSA_RETURN_IF_ERROR(read_int(c, "index_skip_topk_offset", &cfg.index_skip_topk_offset));

  // rotary_dim wins when both are given; partial_rotary_factor scales the (possibly loaded)
  // head_dim and must give a whole number of dimensions.
  if (c.find("rotary_dim") != nullptr) {
    MSA_RETURN_IF_ERROR(read_int(c, "rotary_dim", &cfg.rotary_dim));
  } else if (c.find("partial_rotary_factor") != nullptr) {
    double factor = 0.0;
    MSA_RETURN_IF_ERROR(read_double(c, "partial_rotary_factor", &factor));
    const double dims = factor * cfg.head_dim;
    if (!(factor > 0.0 && factor <= 1.0) || dims != std::floor(dims)) {
      std::ostringstream os;
      os << c.name("partial_rotary_factor") << ": " << factor << " * head_dim " << cfg.head_dim
         << " is not a whole number of dimensions in (0, head_dim]";
      return parse_error(os.str());
    }
    cfg.rotary_dim = static_cast<int>(dims);
  }
  MSA_RETURN_IF_ERROR(cfg.validate());
  *out = std::move(cfg);
  return Status::Ok();
}

Status load_hf_config(const std::string& path, ModelConfig* out) {
  // A directory opens as a stream on Linux and reads as empty; reject it as unreadable.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status(StatusCode::kIoError, "config: '" + path + "' is not a readable file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kIoError, "config: cannot open '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status(StatusCode::kIoError, "config: error reading '" + path + "'");
  return parse_hf_config(text.str(), out);
}

Status rank_shape(const ModelConfig& cfg, int tp_size, RankShape* out) {
  if (out == nullptr) return invalid("out: null output pointer");
  MSA_RETURN_IF_ERROR(cfg.validate());
  const std::string tp = std::to_string(tp_size);
  if (tp_size <= 0) return invalid("tp_size: " + tp + ", expected a positive rank count");
  if (cfg.num_q_heads % tp_size != 0) {
    return invalid("tp_size: " + tp +
                   " does not divide num_q_heads = " + std::to_string(cfg.num_q_heads));
  }
  const bool split_kv = tp_size <= cfg.num_kv_heads;
  if (split_kv ? cfg.num_kv_heads % tp_size != 0 : tp_size % cfg.num_kv_heads != 0) {
    return invalid("tp_size: " + tp + " neither divides nor is a multiple of num_kv_heads = " +
                   std::to_string(cfg.num_kv_heads));
  }
  RankShape r;
  r.tp_size = tp_size;
  r.num_q_heads = cfg.num_q_heads / tp_size;
  // Beyond num_kv_heads ranks every rank holds one (replicated) KV head.
  r.num_kv_heads = split_kv ? cfg.num_kv_heads / tp_size : 1;
  r.num_index_heads = r.num_kv_heads;
  r.group_size = r.num_q_heads / r.num_kv_heads;
  r.head_dim = cfg.head_dim;
  r.index_dim = cfg.sparse_index_dim;
  // [q | k | v | index_q | index_k] per token (spec B1); the index parts use index_dim, which
  // equals head_dim in MiniMax-M3. Computed in int64: the row must fit an int.
  const int64_t width = (int64_t{r.num_q_heads} + 2 * int64_t{r.num_kv_heads}) * r.head_dim +
                        (int64_t{r.num_index_heads} + 1) * r.index_dim;
  if (width > std::numeric_limits<int>::max()) {
    return invalid(
        "config: the fused row of a rank, (num_q_heads + 2 num_kv_heads) * head_dim + "
        "(index heads + 1) * sparse_index_dim = " +
        std::to_string(width) + " elements at tp " + tp + ", exceeds 2^31 - 1");
  }
  r.fused_row_width = static_cast<int>(width);
  *out = r;
  return Status::Ok();
}

Status plan_topk_reuse(const ModelConfig& cfg, std::vector<LayerKind>* out) {
  if (out == nullptr) return invalid("out: null output pointer");
  MSA_RETURN_IF_ERROR(cfg.validate());
  std::vector<LayerKind> plan;
  plan.reserve(static_cast<size_t>(cfg.num_layers));
  int ordinal = 0;
  for (int layer = 0; layer < cfg.num_layers; ++layer) {
    if (!cfg.is_sparse_layer(layer)) {
      plan.push_back(LayerKind::kDense);
      continue;
    }
    const int shifted = std::max(ordinal - cfg.index_skip_topk_offset, 0);
    const bool compute = !cfg.use_index_cache || shifted % cfg.index_topk_freq == 0;
    plan.push_back(compute ? LayerKind::kSparseCompute : LayerKind::kSparseReuse);
    ++ordinal;
  }
  *out = std::move(plan);
  return Status::Ok();
}

}  // namespace msa
