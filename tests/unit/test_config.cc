// ModelConfig: the MiniMax-M3 preset (spec A1), TP rank shapes (spec B1), Hugging Face
// config.json loading and the cross-layer top-k reuse plan (spec A9).
#include "msa/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

namespace msa {
namespace {

TEST(ModelConfig, MiniMaxM3Preset) {
  const ModelConfig c = ModelConfig::minimax_m3();
  EXPECT_EQ(c.hidden_size, 6144);
  EXPECT_EQ(c.num_layers, 60);
  EXPECT_EQ(c.num_q_heads, 64);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.rope_theta, 5e6);
  EXPECT_EQ(c.max_position_embeddings, 524288);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.sparse_block_size, 128);
  EXPECT_EQ(c.sparse_topk_blocks, 16);
  EXPECT_EQ(c.sparse_num_index_heads, 4);
  EXPECT_EQ(c.sparse_index_dim, 128);
  EXPECT_EQ(c.sparse_init_blocks, 0);
  EXPECT_EQ(c.sparse_local_blocks, 1);
  EXPECT_FALSE(c.use_index_cache);
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(c.effective_softmax_scale(), static_cast<float>(1.0 / std::sqrt(128.0)));
  for (int layer = 0; layer < 60; ++layer) EXPECT_EQ(c.is_sparse_layer(layer), layer >= 3);
  EXPECT_FALSE(c.is_sparse_layer(60));
  EXPECT_FALSE(c.is_sparse_layer(-1));

  ModelConfig scaled = c;
  scaled.softmax_scale = 0.25;
  EXPECT_EQ(scaled.effective_softmax_scale(), 0.25f);
  ModelConfig pattern = c;
  pattern.num_layers = 4;
  pattern.sparse_layers = {true, false, true, false};
  EXPECT_TRUE(pattern.is_sparse_layer(0));
  EXPECT_FALSE(pattern.is_sparse_layer(1));
  EXPECT_TRUE(pattern.is_sparse_layer(2));
}

TEST(ModelConfig, ValidateRejectsInconsistentValues) {
  auto rejected = [](void (*mutate)(ModelConfig&)) {
    ModelConfig c = ModelConfig::minimax_m3();
    mutate(c);
    return c.validate().code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.hidden_size = 0; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.num_layers = -1; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.head_dim = 0; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.rotary_dim = 63; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.rotary_dim = 130; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.num_q_heads = 66; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.sparse_num_index_heads = 8; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.sparse_layers = {true, false}; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.sparse_topk_blocks = 0; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.sparse_block_size = 0; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.sparse_local_blocks = -1; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.sparse_init_blocks = 16; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.rope_theta = 0.0; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.rms_norm_eps = -1.0; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.softmax_scale = -0.1; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.index_topk_freq = 0; }));
  EXPECT_TRUE(rejected([](ModelConfig& c) { c.index_skip_topk_offset = -1; }));
  EXPECT_FALSE(rejected([](ModelConfig& c) { c.rotary_dim = 128; }));
}

TEST(RankShape, MiniMaxM3TensorParallel) {
  const ModelConfig c = ModelConfig::minimax_m3();
  struct Want {
    int tp, nq, nkv, niq, group, width;
  };
  // Spec B1 table: KV heads split up to TP4 and replicated at TP8.
  for (const Want& w : {Want{1, 64, 4, 4, 16, 9856}, Want{2, 32, 2, 2, 16, 4992},
                        Want{4, 16, 1, 1, 16, 2560}, Want{8, 8, 1, 1, 8, 1536}}) {
    RankShape r;
    ASSERT_TRUE(rank_shape(c, w.tp, &r).ok()) << "tp " << w.tp;
    EXPECT_EQ(r.tp_size, w.tp);
    EXPECT_EQ(r.num_q_heads, w.nq) << "tp " << w.tp;
    EXPECT_EQ(r.num_kv_heads, w.nkv) << "tp " << w.tp;
    EXPECT_EQ(r.num_index_heads, w.niq) << "tp " << w.tp;
    EXPECT_EQ(r.group_size, w.group) << "tp " << w.tp;
    EXPECT_EQ(r.head_dim, 128);
    EXPECT_EQ(r.index_dim, 128);
    EXPECT_EQ(r.fused_row_width, w.width) << "tp " << w.tp;
  }
}

TEST(RankShape, RejectsBadTensorParallelSizes) {
  const ModelConfig c = ModelConfig::minimax_m3();
  RankShape r;
  r.tp_size = 77;
  for (int tp : {0, -1, 3, 6, 128}) {
    EXPECT_EQ(rank_shape(c, tp, &r).code(), StatusCode::kInvalidArgument) << "tp " << tp;
  }
  EXPECT_EQ(r.tp_size, 77) << "output left unchanged";
  // 16 divides the 64 q heads and is a multiple of the 4 KV heads: one replicated KV head.
  ASSERT_TRUE(rank_shape(c, 16, &r).ok());
  EXPECT_EQ(r.num_q_heads, 4);
  EXPECT_EQ(r.num_kv_heads, 1);
  ModelConfig six = c;
  six.num_kv_heads = 6;
  six.sparse_num_index_heads = 6;
  six.num_q_heads = 48;
  EXPECT_EQ(rank_shape(six, 4, &r).code(), StatusCode::kInvalidArgument)
      << "4 neither divides nor is a multiple of 6 KV heads";
}

const char* kHfConfig = R"({
  "architectures": ["MiniMaxM3ForCausalLM"],
  "hidden_size": 1,
  "text_config": {
    "hidden_size": 2048,
    "num_hidden_layers": 6,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "partial_rotary_factor": 0.5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 1048576,
    "rms_norm_eps": 1e-5,
    "sparse_block_size": 64,
    "sparse_topk_blocks": 8,
    "sparse_num_index_heads": 2,
    "sparse_index_dim": 32,
    "sparse_init_block": 1,
    "sparse_local_block": 2,
    "sparse_attention_freq": [0, 1, 1, true, 0, 1],
    "use_index_cache": true,
    "index_topk_freq": 2,
    "index_skip_topk_offset": 1,
    "rope_scaling": null,
    "unrelated": {"nested": [1, 2]}
  }
})";

TEST(HfConfig, ReadsTextConfig) {
  ModelConfig c;
  const Status s = parse_hf_config(kHfConfig, &c);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(c.hidden_size, 2048);  // text_config wins over the top level
  EXPECT_EQ(c.num_layers, 6);
  EXPECT_EQ(c.num_q_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rotary_dim, 32);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.sparse_block_size, 64);
  EXPECT_EQ(c.sparse_topk_blocks, 8);
  EXPECT_EQ(c.sparse_num_index_heads, 2);
  EXPECT_EQ(c.sparse_index_dim, 32);
  EXPECT_EQ(c.sparse_init_blocks, 1);
  EXPECT_EQ(c.sparse_local_blocks, 2);
  EXPECT_EQ(c.sparse_layers, (std::vector<bool>{false, true, true, true, false, true}));
  EXPECT_TRUE(c.use_index_cache);
  EXPECT_EQ(c.index_topk_freq, 2);
  EXPECT_EQ(c.index_skip_topk_offset, 1);
}

TEST(HfConfig, TopLevelFallbackAndDefaults) {
  ModelConfig c;
  c.hidden_size = 1;
  ASSERT_TRUE(parse_hf_config(R"({"num_hidden_layers": 62, "rotary_dim": 128})", &c).ok());
  EXPECT_EQ(c.num_layers, 62);
  EXPECT_EQ(c.rotary_dim, 128);
  EXPECT_EQ(c.hidden_size, 6144);  // absent keys take the M3 defaults
  EXPECT_EQ(c.num_q_heads, 64);
  EXPECT_TRUE(c.is_sparse_layer(61));
  EXPECT_FALSE(c.is_sparse_layer(2));
  // rotary_dim wins over partial_rotary_factor.
  ASSERT_TRUE(parse_hf_config(R"({"rotary_dim": 32, "partial_rotary_factor": 0.5})", &c).ok());
  EXPECT_EQ(c.rotary_dim, 32);
  ASSERT_TRUE(parse_hf_config(R"({"partial_rotary_factor": 0.25})", &c).ok());
  EXPECT_EQ(c.rotary_dim, 32);
}

TEST(HfConfig, Errors) {
  ModelConfig c;
  c.hidden_size = 1;
  Status s = parse_hf_config("{\"hidden_size\": 6144,\n \"head_dim\" 128}", &c);
  EXPECT_EQ(s.code(), StatusCode::kParseError);
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s.message();

  // A value of the wrong type: the key, its line, what was expected and what was found.
  s = parse_hf_config(
      "{\"text_config\": {\n  \"hidden_size\": 6144,\n  \"num_attention_heads\": \"64\"}}", &c);
  EXPECT_EQ(s.code(), StatusCode::kParseError);
  EXPECT_EQ(s.message(),
            "config key 'num_attention_heads' (line 3): expected an integer in the 32-bit range, "
            "got a string");
  s = parse_hf_config("{\"head_dim\": 128,\n\"sparse_attention_freq\": [0, 1, 2]}", &c);
  EXPECT_EQ(s.message(),
            "config key 'sparse_attention_freq' (line 2): element 2 must be 0 or 1, got 2");
  // Keys of text_config are found there, not at the top level with the same name.
  s = parse_hf_config("{\"rope_theta\": 1,\n \"text_config\": {\n\n \"rope_theta\": \"x\"}}", &c);
  EXPECT_EQ(s.message(), "config key 'rope_theta' (line 4): expected a number, got a string");
  for (const char* bad :
       {R"({"head_dim": 1.5})", R"({"use_index_cache": 1})", R"({"rope_theta": "5e6"})",
        R"({"sparse_attention_freq": [0, 2]})", R"({"sparse_attention_freq": 1})",
        R"({"text_config": [1]})", R"({"hidden_size": 1e12})", R"({"partial_rotary_factor": 0.3})",
        R"([1, 2])"}) {
    EXPECT_EQ(parse_hf_config(bad, &c).code(), StatusCode::kParseError) << bad;
  }
  // Well-formed but inconsistent: the validation error.
  EXPECT_EQ(parse_hf_config(R"({"sparse_attention_freq": [0, 1]})", &c).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c.hidden_size, 1) << "output left unchanged on error";
}

TEST(HfConfig, LoadsFile) {
  ModelConfig c;
  EXPECT_EQ(load_hf_config("/nonexistent/msa/config.json", &c).code(), StatusCode::kIoError);
  EXPECT_EQ(load_hf_config(::testing::TempDir(), &c).code(), StatusCode::kIoError);
  const std::string path = ::testing::TempDir() + "msa_test_config.json";
  {
    std::ofstream f(path);
    f << kHfConfig;
  }
  ASSERT_TRUE(load_hf_config(path, &c).ok());
  EXPECT_EQ(c.num_layers, 6);
  std::remove(path.c_str());
}

int count(const std::vector<LayerKind>& plan, LayerKind k) {
  return static_cast<int>(std::count(plan.begin(), plan.end(), k));
}

TEST(TopkReusePlan, DefaultComputesEverySparseLayer) {
  std::vector<LayerKind> plan;
  ASSERT_TRUE(plan_topk_reuse(ModelConfig::minimax_m3(), &plan).ok());
  ASSERT_EQ(plan.size(), 60u);
  EXPECT_EQ(count(plan, LayerKind::kDense), 3);
  EXPECT_EQ(count(plan, LayerKind::kSparseCompute), 57);
  for (int l = 0; l < 3; ++l) EXPECT_EQ(plan[l], LayerKind::kDense);
}

TEST(TopkReusePlan, FrequencyFour) {
  ModelConfig c = ModelConfig::minimax_m3();
  c.use_index_cache = true;
  c.index_topk_freq = 4;
  std::vector<LayerKind> plan;
  ASSERT_TRUE(plan_topk_reuse(c, &plan).ok());
  EXPECT_EQ(count(plan, LayerKind::kSparseCompute), 15);
  EXPECT_EQ(count(plan, LayerKind::kSparseReuse), 42);
  for (int l = 3; l < 60; ++l) {
    const bool compute = (l - 3) % 4 == 0;  // ordinals 0, 4, 8, ...
    EXPECT_EQ(plan[l], compute ? LayerKind::kSparseCompute : LayerKind::kSparseReuse) << l;
  }
}

TEST(TopkReusePlan, OffsetDelaysReuse) {
  ModelConfig c = ModelConfig::minimax_m3();
  c.use_index_cache = true;
  c.index_topk_freq = 3;
  c.index_skip_topk_offset = 2;
  std::vector<LayerKind> plan;
  ASSERT_TRUE(plan_topk_reuse(c, &plan).ok());
  // Ordinals 0..2 clamp to 0 (compute); then ordinal o computes iff (o - 2) % 3 == 0.
  const LayerKind C = LayerKind::kSparseCompute, R = LayerKind::kSparseReuse;
  const std::vector<LayerKind> head = {C, C, C, R, R, C, R, R, C};
  for (size_t o = 0; o < head.size(); ++o) EXPECT_EQ(plan[3 + o], head[o]) << "ordinal " << o;
  // Dense layers in a custom pattern do not advance the sparse ordinal.
  c.num_layers = 5;
  c.sparse_layers = {true, false, true, true, true};
  c.index_skip_topk_offset = 0;
  c.index_topk_freq = 2;
  ASSERT_TRUE(plan_topk_reuse(c, &plan).ok());
  EXPECT_EQ(plan, (std::vector<LayerKind>{C, LayerKind::kDense, R, C, R}));
}

TEST(TopkReusePlan, RejectsNonPositiveFrequency) {
  ModelConfig c = ModelConfig::minimax_m3();
  c.use_index_cache = true;
  c.index_topk_freq = 0;
  std::vector<LayerKind> plan;
  EXPECT_EQ(plan_topk_reuse(c, &plan).code(), StatusCode::kInvalidArgument);
  c.index_topk_freq = -2;
  EXPECT_EQ(plan_topk_reuse(c, &plan).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace msa
