// Sparse attention (decode and prefill rows, spec A5) on the binary's test device against the
// float64 oracle; on CUDA also against the CPU backend. Covers cache layouts, bf16 and e4m3
// caches with every scale mode, TP head presets, context lengths around block boundaries and
// beyond 64K, padded requests and rows, the sparse == dense property, thread-count invariance,
// and bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "ops/attention_cases.h"

namespace msa {
namespace test {
namespace {

using attn::Batch;
using attn::BatchSpec;
using attn::Form;
using attn::Layout;

struct NamedSpec {
  std::string name;
  BatchSpec spec;
};

void PrintTo(const NamedSpec& s, std::ostream* os) { *os << s.name; }

std::vector<NamedSpec> decode_specs() {
  std::vector<NamedSpec> v;
  {
    BatchSpec s;  // TP4 heads, block-boundary contexts, a padded request, f32 output
    s.query_len = 1;
    s.seq_lens = {1, 127, 128, 0, 129, 2047, 2048, 2049};
    s.topk_extra_rows = 3;
    v.push_back({"Ql1Tp4PackedBf16", s});
  }
  {
    BatchSpec s;  // speculative rows, split NHD, bf16 output without lse
    s.query_len = 4;
    s.num_q_heads = 8;
    s.seq_lens = {4, 127, 0, 128, 129, 2047, 2048, 2049};
    s.layout = Layout::kSplitNhd;
    s.out_dtype = DType::kBF16;
    s.with_lse = false;
    s.seed = 2;
    v.push_back({"Ql4Tp8NhdBf16Out", s});
  }
  {
    BatchSpec s;  // TP2 heads, HND, e4m3 without scale, few top-k entries
    s.num_q_heads = 32;
    s.num_kv_heads = 2;
    s.head_dim = 64;
    s.seq_lens = {300, 0, 1000};
    s.topk_width = 4;
    s.layout = Layout::kSplitHnd;
    s.cache_dtype = DType::kE4M3;
    s.seed = 3;
    v.push_back({"Ql1Tp2HndE4m3None", s});
  }
  {
    BatchSpec s;  // TP1 heads, e4m3 per-layer scales
    s.query_len = 4;
    s.num_q_heads = 64;
    s.num_kv_heads = 4;
    s.seq_lens = {256, 513};
    s.topk_width = 3;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.seed = 4;
    v.push_back({"Ql4Tp1PackedE4m3PerLayer", s});
  }
  {
    // e4m3 per-layer scales that are not powers of two (CUDA applies them to the fp32 logits
    // and outputs instead of to each element), batch 1 and a longer request.
    BatchSpec s;
    s.seq_lens = {2049, 700};
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.layer_k_scale = 0.3;
    s.layer_v_scale = 0.0173;
    s.seed = 9;
    v.push_back({"Ql1Tp4E4m3PerLayerOddScales", s});
  }
  {
    // TP8 heads (zero-padded MMA rows) on e4m3 per-layer scales, speculative rows.
    BatchSpec s;
    s.query_len = 4;
    s.num_q_heads = 8;
    s.seq_lens = {900, 0, 2050};
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.out_dtype = DType::kBF16;
    s.seed = 12;
    v.push_back({"Ql4Tp8E4m3PerLayer", s});
  }
  {
    // q beyond f16's range (CUDA's f16 MMA path scales q by a power of two first), with a
    // softmax scale that keeps the logits moderate.
    BatchSpec s;
    s.query_len = 2;
    s.seq_lens = {1500, 300};
    s.cache_dtype = DType::kE4M3;
    s.q_range = 2e5;
    s.softmax_scale = 1e-6f;
    s.seed = 10;
    v.push_back({"Ql2E4m3LargeQ", s});
  }
  {
    // q below f16's normal range, f32 q (not rounded to bf16 on the way in).
    BatchSpec s;
    s.seq_lens = {2049};
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.q_dtype = DType::kF32;
    s.q_range = 1e-6;
    s.softmax_scale = 1e5f;
    s.seed = 11;
    v.push_back({"Ql1E4m3TinyQ", s});
  }
  {
    // e4m3 per-token-head scales spread over eight decades (CUDA rescales its probabilities by
    // a running power of two of the V scales), speculative rows.
    BatchSpec s;
    s.query_len = 2;
    s.seq_lens = {2049, 600};
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.token_scale_lo = 1e-6;
    s.token_scale_hi = 1e2;
    s.token_scale_log = true;
    s.seed = 13;
    v.push_back({"Ql2E4m3PerTokenWideScales", s});
  }
  {
    // Subnormal per-token-head scales (about 1e-40): CUDA's running power of two of the V
    // scales must stay a normal float there (2^-v_exp was infinite, and so were the outputs).
    BatchSpec s;
    s.query_len = 2;
    s.seq_lens = {2049, 300};
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.token_scale_lo = 1e-42;
    s.token_scale_hi = 1e-39;
    s.token_scale_log = true;
    s.seed = 18;
    v.push_back({"Ql2E4m3PerTokenSubnormalScales", s});
  }
  {
    BatchSpec s;  // e4m3 per-token-head scales, bf16 output
    s.seq_lens = {2049, 129, 0, 700};
    s.layout = Layout::kSplitNhd;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.out_dtype = DType::kBF16;
    s.seed = 5;
    v.push_back({"Ql1Tp4NhdE4m3PerTokenHead", s});
  }
  {
    BatchSpec s;  // f16 q and output, explicit softmax scale
    s.query_len = 2;
    s.num_q_heads = 8;
    s.seq_lens = {130, 0, 257};
    s.topk_width = 2;
    s.layout = Layout::kSplitHnd;
    s.q_dtype = DType::kF16;
    s.out_dtype = DType::kF16;
    s.softmax_scale = 0.05f;
    s.seed = 6;
    v.push_back({"Ql2F16ExplicitScale", s});
  }
  {
    BatchSpec s;  // > 64K context: only the 16 selected blocks are attended; f32 q
    s.num_q_heads = 8;
    s.seq_lens = {65536 + 37, 0};
    s.shared_pages = true;
    s.q_dtype = DType::kF32;
    s.seed = 7;
    v.push_back({"LongContext64K", s});
  }
  {
    // Contexts just past and just below 128K tokens (1027 and 1024 blocks: tables wider than
    // 1024 columns) with speculative rows, beside a short one.
    BatchSpec s;
    s.query_len = 2;
    s.seq_lens = {131072 + 300, 4000, 131072 - 5};
    s.shared_pages = true;
    s.seed = 8;
    v.push_back({"LongContext128KTwoRows", s});
  }
  {
    // K/V that the one-block CUDA kernel does not take (64-key blocks; head dim 64): the 4-warp
    // kernel's in-cluster plan at batch 1-2, with NaN past each request's length; bf16, and
    // e4m3 with a per-layer and with per-token-head scales.
    BatchSpec s;
    s.block_size = 64;
    s.seq_lens = {1000, 70};
    s.nan_past_len = true;
    s.seed = 19;
    v.push_back({"Ql1Bs64Bf16NanPastLength", s});
    s.block_size = 128;
    s.head_dim = 64;
    s.query_len = 2;
    s.seq_lens = {2049};
    s.layout = Layout::kSplitNhd;
    s.seed = 20;
    v.push_back({"Ql2D64Bf16NanPastLength", s});
    s.head_dim = 128;
    s.block_size = 64;
    s.query_len = 1;
    s.seq_lens = {1500, 200};
    s.layout = Layout::kPacked;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.seed = 21;
    v.push_back({"Ql1Bs64E4m3PerLayerNanPastLength", s});
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.seed = 22;
    v.push_back({"Ql1Bs64E4m3PerTokenNanPastLength", s});
  }
  {
    // NaN in every slot past each request's length (K, V and scales): never visible, so the
    // outputs must not change. bf16, e4m3 with per-layer and with per-token-head scales.
    BatchSpec s;
    s.seq_lens = {2049, 600, 77, 130};
    s.nan_past_len = true;
    s.seed = 14;
    v.push_back({"Ql1NanPastLengthBf16", s});
    s.query_len = 4;
    s.seq_lens = {1001, 129};
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.seed = 15;
    v.push_back({"Ql4NanPastLengthE4m3PerLayer", s});
    s.query_len = 2;
    s.seq_lens = {700, 2047};
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.seed = 16;
    v.push_back({"Ql2NanPastLengthE4m3PerToken", s});
  }
  return v;
}

class SparseAttentionDecodeCases : public ::testing::TestWithParam<NamedSpec> {};

TEST_P(SparseAttentionDecodeCases, MatchesOracle) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s = GetParam().spec;
  s.form = Form::kDecode;
  attn::check_against_oracle(s);
}

INSTANTIATE_TEST_SUITE_P(SparseAttention, SparseAttentionDecodeCases,
                         ::testing::ValuesIn(decode_specs()),
                         [](const ::testing::TestParamInfo<NamedSpec>& i) { return i.param.name; });

std::vector<NamedSpec> prefill_specs() {
  std::vector<NamedSpec> v;
  {
    BatchSpec s;  // chunked prefill with prefixes, a request without rows, padding rows
    s.seq_lens = {300, 129, 2100, 50};
    s.query_lens = {45, 129, 5, 0};
    s.padding_rows = 3;
    s.topk_extra_rows = 2;
    v.push_back({"ChunkedTp4Packed", s});
  }
  {
    BatchSpec s;  // TP2 heads, HND, e4m3 per-token-head, bf16 output
    s.num_q_heads = 32;
    s.num_kv_heads = 2;
    s.head_dim = 64;
    s.seq_lens = {200, 400};
    s.query_lens = {70, 20};
    s.padding_rows = 1;
    s.topk_width = 3;
    s.layout = Layout::kSplitHnd;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.out_dtype = DType::kBF16;
    s.seed = 12;
    v.push_back({"Tp2HndE4m3PerTokenHead", s});
  }
  {
    BatchSpec s;  // NaN in the slots past each request's length, head dim 64
    s.head_dim = 64;
    s.seq_lens = {300, 1001};
    s.query_lens = {20, 35};
    s.nan_past_len = true;
    s.seed = 17;
    v.push_back({"NanPastLengthD64", s});
  }
  {
    BatchSpec s;  // TP1 heads, NHD, e4m3 per-layer, the own block not forced
    s.num_q_heads = 64;
    s.num_kv_heads = 4;
    s.seq_lens = {17, 260};
    s.query_lens = {17, 3};
    s.topk_width = 2;
    s.own_block = false;
    s.layout = Layout::kSplitNhd;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.with_lse = false;
    s.seed = 13;
    v.push_back({"Tp1NhdE4m3PerLayerNoOwnBlock", s});
  }
  {
    BatchSpec s;  // TP8 heads, f32 q and output
    s.num_q_heads = 8;
    s.seq_lens = {129, 1};
    s.query_lens = {129, 1};
    s.topk_width = 1;
    s.q_dtype = DType::kF32;
    s.seed = 14;
    v.push_back({"Tp8F32TopkOne", s});
  }
  {
    // A few rows with long prefixes and padding rows: on CUDA the splits of each row run as
    // one thread-block cluster and merge in distributed shared memory (decode cases cover the
    // same path; this is the prefill row map through it).
    BatchSpec s;
    s.seq_lens = {3000, 2200};
    s.query_lens = {4, 3};
    s.padding_rows = 2;
    s.seed = 15;
    v.push_back({"FewRowsLongPrefixes", s});
  }
  // Shapes the CUDA backend runs on tensor cores (head dim and block 128, 8 or 16 q heads per
  // KV head, at least 8 rows per request on average; 16-bit caches or e4m3 with per-layer
  // scales): tiles that start and end mid-window, NaN past the lengths, every layout.
  {
    BatchSpec s;
    s.seq_lens = {1500, 700, 4096 + 250, 129};
    s.query_lens = {600, 700, 250, 129};
    s.padding_rows = 4;
    s.nan_past_len = true;
    s.seed = 31;
    v.push_back({"TensorCoreBf16PackedNanPastLength", s});
  }
  {
    BatchSpec s;
    s.seq_lens = {900, 333 + 1000};
    s.query_lens = {400, 333};
    s.layout = Layout::kSplitNhd;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.out_dtype = DType::kBF16;
    s.nan_past_len = true;
    s.seed = 32;
    v.push_back({"TensorCoreE4m3PerLayerNhd", s});
  }
  {
    BatchSpec s;
    s.seq_lens = {1100, 200 + 700};
    s.query_lens = {350, 200};
    s.layout = Layout::kPacked;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.out_dtype = DType::kF32;
    s.nan_past_len = true;
    s.seed = 135;
    v.push_back({"TensorCoreE4m3PerTokenHeadPacked", s});
  }
  {
    // The two e4m3 cases above hold at least 8 rows per block-table page, and on CUDA read a
    // per-call bf16 copy of their pages; this one (short chunks after long prefixes) converts
    // per tile under MSA_CUDA_PREFILL=tc, and takes the CUDA-core kernels by default.
    BatchSpec s;
    s.seq_lens = {2600, 900};
    s.query_lens = {200, 100};
    s.layout = Layout::kSplitHnd;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.out_dtype = DType::kBF16;
    s.nan_past_len = true;
    s.seed = 136;
    v.push_back({"TensorCoreE4m3PerTileLongPrefixHnd", s});
  }
  {
    BatchSpec s;
    s.seq_lens = {1200, 77};
    s.query_lens = {300, 77};
    s.layout = Layout::kSplitHnd;
    s.cache_dtype = DType::kF16;
    s.q_dtype = DType::kF16;
    s.out_dtype = DType::kF16;
    s.softmax_scale = 0.05f;
    s.seed = 33;
    v.push_back({"TensorCoreF16Hnd", s});
  }
  {
    BatchSpec s;  // TP8 (8 q heads per KV head: 16-token tiles), no forced own block
    s.num_q_heads = 8;
    s.seq_lens = {2000, 500};
    s.query_lens = {300, 100};
    s.own_block = false;
    s.seed = 34;
    v.push_back({"TensorCoreTp8NoOwnBlock", s});
  }
  {
    BatchSpec s;  // TP2 (two KV heads), top-k width 8, shared pages
    s.num_q_heads = 32;
    s.num_kv_heads = 2;
    s.seq_lens = {1100, 640};
    s.query_lens = {200, 640};
    s.topk_width = 8;
    s.shared_pages = true;
    s.seed = 35;
    v.push_back({"TensorCoreTp2Width8SharedPages", s});
  }
  {
    BatchSpec s;  // a negative softmax scale (the tensor-core kernel negates Q)
    s.seq_lens = {1300, 400 + 600};
    s.query_lens = {500, 400};
    s.softmax_scale = -0.06f;
    s.seed = 36;
    v.push_back({"TensorCoreNegativeScale", s});
  }
  return v;
}

class SparseAttentionPrefillCases : public ::testing::TestWithParam<NamedSpec> {};

TEST_P(SparseAttentionPrefillCases, MatchesOracle) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s = GetParam().spec;
  s.form = Form::kPrefill;
  attn::check_against_oracle(s);
}

INSTANTIATE_TEST_SUITE_P(SparseAttention, SparseAttentionPrefillCases,
                         ::testing::ValuesIn(prefill_specs()),
                         [](const ::testing::TestParamInfo<NamedSpec>& i) { return i.param.name; });

// Compares two runs of the same inputs: bitwise on the CPU (same accumulation order), within
// the CUDA budget otherwise.
void expect_same_outputs(const Batch& a, const Batch& b, const std::string& what) {
  if (a.device.is_cpu()) {
    EXPECT_TRUE(attn::same_bytes(a.out, b.out)) << what << ": out differs";
    if (a.spec.with_lse) {
      EXPECT_TRUE(attn::same_bytes(a.lse, b.lse)) << what << ": lse differs";
    }
    return;
  }
  const double max_v = attn::max_abs(a.cache->values().v);
  attn::expect_outputs_near(a, attn::outputs_as_result(b), max_v, a.device, what);
}

// Property: when the top-k lists every visible block, sparse attention equals dense attention.
TEST(SparseAttention, EqualsDenseWhenAllBlocksSelected) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.num_q_heads = 16;
  s.seq_lens = {1, 127, 128, 129, 2047, 2048};
  s.topk_all_visible = true;
  s.layout = Layout::kSplitNhd;
  s.seed = 21;

  s.form = Form::kDecode;
  std::unique_ptr<Batch> sparse = attn::make_batch(s, test::test_device());
  ASSERT_TRUE(attn::run_batch(*sparse).ok());
  BatchSpec d = s;
  d.form = Form::kDense;
  d.query_lens.assign(s.seq_lens.size(), 1);
  std::unique_ptr<Batch> dense = attn::make_batch(d, test::test_device());
  ASSERT_TRUE(attn::run_batch(*dense).ok());
  expect_same_outputs(*sparse, *dense, "decode vs dense");

  BatchSpec p = s;
  p.form = Form::kPrefill;
  p.seq_lens = {300, 2048, 77};
  p.query_lens = {40, 9, 77};
  p.padding_rows = 2;
  d = p;
  d.form = Form::kDense;
  sparse = attn::make_batch(p, test::test_device());
  ASSERT_TRUE(attn::run_batch(*sparse).ok());
  dense = attn::make_batch(d, test::test_device());
  ASSERT_TRUE(attn::run_batch(*dense).ok());
  expect_same_outputs(*sparse, *dense, "prefill vs dense");
}

// Property: the CPU backend gives the same bits for every thread count; CUDA gives the same
// bits run to run (spec A5).
TEST(SparseAttention, DeterministicAcrossThreadCounts) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.form = Form::kPrefill;
  s.num_q_heads = 32;
  s.num_kv_heads = 2;
  s.seq_lens = {700, 129, 40};
  s.query_lens = {6, 2, 40};
  s.padding_rows = 1;
  s.topk_width = 4;
  s.cache_dtype = DType::kE4M3;
  s.scale_mode = KvScaleMode::kPerTokenHead;
  s.seed = 31;
  std::unique_ptr<Batch> ref = attn::make_batch(s, test::test_device());
  ASSERT_TRUE(attn::run_batch(*ref, Stream{nullptr, 1}).ok());
  for (int threads : {2, 8}) {
    std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
    ASSERT_TRUE(attn::run_batch(*b, Stream{nullptr, threads}).ok());
    EXPECT_TRUE(attn::same_bytes(ref->out, b->out)) << threads << " threads: out differs";
    EXPECT_TRUE(attn::same_bytes(ref->lse, b->lse)) << threads << " threads: lse differs";
  }
  // Decode rows with fewer (row, KV head) pairs than threads: head groups are sliced.
  BatchSpec d;
  d.seq_lens = {1500};
  d.seed = 32;
  std::unique_ptr<Batch> one = attn::make_batch(d, test::test_device());
  ASSERT_TRUE(attn::run_batch(*one, Stream{nullptr, 1}).ok());
  std::unique_ptr<Batch> many = attn::make_batch(d, test::test_device());
  ASSERT_TRUE(attn::run_batch(*many, Stream{nullptr, 8}).ok());
  EXPECT_TRUE(attn::same_bytes(one->out, many->out));
  EXPECT_TRUE(attn::same_bytes(one->lse, many->lse));
}

// Q rows the one-block CUDA kernel cannot read as 16-byte runs (head stride D + 1) at batch 2,
// which it would otherwise run: the 4-warp kernel takes the call, with a workspace sized for the
// aligned Q (workspace_size counts both plans), and the outputs match the oracle.
TEST(SparseAttention, UnalignedQRowsMatchOracle) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.seq_lens = {2049, 700};
  s.nan_past_len = true;
  s.seed = 33;
  std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
  const oracle::AttentionResult want =
      oracle::attention(attn::oracle_batch(*b), attn::q_values(*b), b->cache->values());
  const int64_t T = b->rows, H = s.num_q_heads, D = s.head_dim;
  TestTensor q(DType::kBF16, {T, H, D}, {H * (D + 1), D + 1, 1}, T * H * (D + 1), b->device);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t d = 0; d < D; ++d) q.set({t, h, d}, b->q.get({t, h, d}));
    }
  }
  q.upload();
  SparseAttentionDecodeArgs a = attn::decode_args(*b);
  size_t aligned_bytes = 0;
  ASSERT_TRUE(workspace_size(a, &aligned_bytes).ok());
  a.q = q.view();
  size_t unaligned_bytes = 0;
  ASSERT_TRUE(workspace_size(a, &unaligned_bytes).ok());
  EXPECT_EQ(aligned_bytes, unaligned_bytes);
  b->out.poison_device();
  b->lse.poison_device();
  ASSERT_TRUE(attn::run_op(a, b->device).ok());
  b->out.download();
  b->lse.download();
  b->flags.download();
  EXPECT_EQ(b->flags.get_flat(0), 0);
  attn::expect_outputs_near(*b, want, attn::max_abs(b->cache->values().v), b->device, "oracle");
}

// The same cache values in the packed, split NHD and split HND layouts give the same bits: the
// layout changes only addresses, never the arithmetic. On CUDA the batch-3 calls of 16-bit K/V
// at head dim 128 run the one-block kernel, the other batch-3 calls as thread-block clusters
// (in-cluster merge), and the 4-row calls of three requests take the 4-warp kernel's merge-kernel
// plan; head dims 64 and 128, 16-bit and e4m3 caches in every scale mode.
TEST(SparseAttention, SameBitsInEveryCacheLayout) {
  MSA_REQUIRE_TEST_DEVICE();
  struct Case {
    DType cache;
    KvScaleMode mode;
    int64_t head_dim;
    int query_len;
    std::vector<int64_t> seq_lens;
  };
  const std::vector<Case> cases = {
      {DType::kBF16, KvScaleMode::kNone, 128, 1, {2049, 700, 4000}},
      {DType::kBF16, KvScaleMode::kNone, 64, 1, {300, 2500, 1800}},
      {DType::kF16, KvScaleMode::kNone, 128, 1, {3000, 129, 2048}},
      {DType::kE4M3, KvScaleMode::kPerLayer, 128, 1, {2049, 700, 4000}},
      {DType::kE4M3, KvScaleMode::kNone, 64, 1, {1000, 3333, 17}},
      {DType::kE4M3, KvScaleMode::kPerTokenHead, 128, 1, {2049, 700, 4000}},
      {DType::kBF16, KvScaleMode::kNone, 128, 4, {2049, 3000, 1500}},
  };
  uint64_t seed = 131;
  for (const Case& c : cases) {
    BatchSpec s;
    s.num_q_heads = 32;
    s.num_kv_heads = 2;
    s.head_dim = c.head_dim;
    s.query_len = c.query_len;
    s.seq_lens = c.seq_lens;
    s.cache_dtype = c.cache;
    s.scale_mode = c.mode;
    s.layer_k_scale = 0.37;
    s.layer_v_scale = 0.011;
    s.logical_kv_fill = true;
    s.seed = seed++;
    const std::string what = std::string(dtype_name(c.cache)) + " mode " +
                             std::to_string(static_cast<int>(c.mode)) + " D " +
                             std::to_string(c.head_dim) + " qlen " + std::to_string(c.query_len);
    s.layout = Layout::kPacked;
    std::unique_ptr<Batch> packed = attn::make_batch(s, test::test_device());
    ASSERT_TRUE(attn::run_batch(*packed).ok()) << what;
    EXPECT_EQ(packed->flags.get_flat(0), 0) << what;
    for (Layout layout : {Layout::kSplitNhd, Layout::kSplitHnd}) {
      s.layout = layout;
      std::unique_ptr<Batch> other = attn::make_batch(s, test::test_device());
      ASSERT_TRUE(attn::run_batch(*other).ok()) << what;
      const std::string name = what + (layout == Layout::kSplitNhd ? ", NHD" : ", HND");
      EXPECT_TRUE(attn::same_bytes(packed->out, other->out)) << name << ": out differs";
      EXPECT_TRUE(attn::same_bytes(packed->lse, other->lse)) << name << ": lse differs";
    }
  }
}

// The fp8 scales are applied: the scaled result matches its oracle (MatchesOracle cases) and
// differs clearly from the result of the same stored bytes read without scales.
TEST(SparseAttention, Fp8ScalesChangeTheResult) {
  MSA_REQUIRE_TEST_DEVICE();
  for (KvScaleMode mode : {KvScaleMode::kPerLayer, KvScaleMode::kPerTokenHead}) {
    BatchSpec s;
    s.form = Form::kPrefill;
    s.num_q_heads = 8;
    s.seq_lens = {17, 300};
    s.query_lens = {17, 2};
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = mode;
    s.seed = 41;
    std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
    ASSERT_TRUE(attn::run_batch(*b).ok());
    const oracle::AttentionResult scaled = attn::outputs_as_result(*b);

    SparseAttentionPrefillArgs a = attn::prefill_args(*b);
    a.kv_cache = b->cache->view_with_mode(KvScaleMode::kNone);
    b->out.poison_device();
    ASSERT_TRUE(attn::run_op(a, b->device).ok());
    b->out.download();
    const oracle::KvValues raw = b->cache->values_with_mode(KvScaleMode::kNone);
    const oracle::AttentionResult want =
        oracle::attention(attn::oracle_batch(*b), attn::q_values(*b), raw);
    b->spec.with_lse = false;  // lse was not rewritten by the unscaled run
    attn::expect_outputs_near(*b, want, attn::max_abs(raw.v), b->device, "unscaled");
    double diff = 0.0;
    for (int64_t i = 0; i < b->out.numel(); ++i) {
      diff = std::max(diff, std::fabs(b->out.get_flat(i) - scaled.out[i]));
    }
    // Scales of 0.05..0.5 shrink V by 2x or more: the results differ by far more than 0.1.
    EXPECT_GT(diff, 0.1) << "scale mode " << static_cast<int>(mode);
  }
}

// Per-token-head V scales enter the output linearly, so multiplying all of them by a power of
// two (2^-20) multiplies the f32 outputs by exactly that and leaves lse unchanged, bit for bit:
// the CPU backend scales each product exactly, and CUDA's probabilities carry the scales
// relative to a running power of two of the largest one, which moves by the same factor. The
// scales are random powers of two, and 0 in the first four 16-key subtiles of every block, so
// warps begin on subtiles whose scales are all zero: those must not move the running power of
// two (raised to 2^0, the later probabilities of 2^-20 scales were rounded into f16's
// subnormals). Several decode rows per request and batch sizes that take different split plans.
TEST(SparseAttention, PowerOfTwoVScalesScaleTheOutputExactly) {
  MSA_REQUIRE_TEST_DEVICE();
  constexpr int kShift = -20;
  for (const std::vector<int64_t>& lens :
       {std::vector<int64_t>{2049, 700, 300}, std::vector<int64_t>(40, 1500)}) {
    BatchSpec s;
    s.query_len = 2;
    s.seq_lens = lens;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.seed = 43;
    std::unique_ptr<Batch> unit = attn::make_batch(s, test::test_device());
    std::unique_ptr<Batch> shifted = attn::make_batch(s, test::test_device());
    const int64_t bs = s.block_size;
    auto scale = [&](int64_t g, int64_t slot) {
      if (slot % bs < 64) return 0.0;
      const uint64_t h =
          (static_cast<uint64_t>(slot) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(g) << 7);
      return std::ldexp(1.0, static_cast<int>(h >> 61) - 3);  // 2^-3 .. 2^4
    };
    unit->cache->set_v_token_scales(scale);
    shifted->cache->set_v_token_scales(
        [&](int64_t g, int64_t slot) { return std::ldexp(scale(g, slot), kShift); });
    ASSERT_TRUE(attn::run_batch(*unit).ok());
    ASSERT_TRUE(attn::run_batch(*shifted).ok());
    EXPECT_EQ(shifted->flags.get_flat(0), 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < unit->out.numel(); ++i) {
      const double want = std::ldexp(unit->out.get_flat(i), kShift);
      if (shifted->out.get_flat(i) != want && bad++ < 5) {
        ADD_FAILURE() << lens.size() << " requests: out flat " << i << " got "
                      << shifted->out.get_flat(i) << " want " << want;
      }
    }
    EXPECT_EQ(bad, 0) << lens.size() << " requests: outputs not scaled exactly";
    EXPECT_TRUE(attn::same_bytes(unit->lse, shifted->lse)) << lens.size() << " requests: lse";
    // And the shifted run against the float64 oracle.
    const oracle::KvValues kv = shifted->cache->values();
    attn::expect_outputs_near(
        *shifted, oracle::attention(attn::oracle_batch(*shifted), attn::q_values(*shifted), kv),
        attn::max_abs(kv.v), shifted->device, "oracle");
  }
}

// Runs the two decode rows of `s` with top-k rows {0, 3, 7} / {1, 4} and with the given rows
// listing the same ids with repeats, and expects the same outputs: a row is a set.
void expect_rows_are_sets(const BatchSpec& s, const std::vector<int32_t>& row0,
                          const std::vector<int32_t>& row1, const std::string& what) {
  std::unique_ptr<Batch> ref = attn::make_batch(s, test::test_device());
  attn::set_topk_row(*ref, 0, 0, {0, 3, 7});
  attn::set_topk_row(*ref, 0, 1, {1, 4});
  ASSERT_TRUE(attn::run_batch(*ref).ok());
  std::unique_ptr<Batch> dup = attn::make_batch(s, test::test_device());
  attn::set_topk_row(*dup, 0, 0, row0);
  attn::set_topk_row(*dup, 0, 1, row1);
  ASSERT_TRUE(attn::run_batch(*dup).ok());
  expect_same_outputs(*dup, *ref, what);
}

// A top-k row is treated as a set: a duplicated id counts once, and neither the order of the
// ids nor a -1 between them matters. (The CUDA kernel takes a shortcut for rows that are
// front-packed and strictly ascending, as the reference rows are; the others take its general
// ranking.)
TEST(SparseAttention, TopkRowIsASet) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.num_q_heads = 8;
  s.seq_lens = {1000, 600};
  s.topk_width = 5;
  s.seed = 51;
  expect_rows_are_sets(s, {0, 3, 3, 7, 7}, {1, 1, 4, 4}, "duplicated ids");
  expect_rows_are_sets(s, {7, 0, 3}, {4, 1}, "ids out of order");
  expect_rows_are_sets(s, {0, -1, 3, 7}, {-1, 1, 4}, "-1 before valid ids");
}

// Rows wider than a warp (here 40 entries) take the CUDA kernel's shared-memory path: the set
// semantics hold there too, with duplicates and the own block past entry 32.
TEST(SparseAttention, WideTopkRowIsASet) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.num_q_heads = 16;
  s.seq_lens = {1000, 600};
  s.topk_width = 40;
  s.seed = 52;
  std::vector<int32_t> row0(33, 3), row1(35, 1);
  row0.insert(row0.end(), {0, 3, 7, 0});
  row1.push_back(4);
  expect_rows_are_sets(s, row0, row1, "wide rows with duplicated ids");
}

// ---- Bad inputs ----

// Uploads a known pattern into out and lse, runs `args`, and checks the status code and that
// the outputs kept their pattern.
template <typename Args>
void expect_rejected(Batch& b, const Args& args, StatusCode code, const std::string& what) {
  b.out.fill_bytes(0x3C);
  b.out.upload();
  b.lse.fill_bytes(0x3C);
  b.lse.upload();
  const Status st = attn::run_op(args, b.device);
  EXPECT_EQ(st.code(), code) << what << ": " << st.to_string();
  EXPECT_FALSE(st.message().empty()) << what;
  b.out.download();
  b.lse.download();
  for (uint8_t x : b.out.host_bytes()) {
    if (x != 0x3C) {
      ADD_FAILURE() << what << ": out was written";
      break;
    }
  }
  for (uint8_t x : b.lse.host_bytes()) {
    if (x != 0x3C) {
      ADD_FAILURE() << what << ": lse was written";
      break;
    }
  }
}

TEST(SparseAttention, RejectsBadArguments) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.query_len = 2;
  s.seq_lens = {300, 0};
  s.topk_width = 4;
  std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
  const Device dev = b->device;
  TestTensor q3 = TestTensor(DType::kBF16, {4, 3, 64}, dev);
  TestTensor q_d32 = TestTensor(DType::kBF16, {4, 4, 32}, dev);
  TestTensor q_strided = TestTensor(DType::kBF16, {4, 4, 64}, {512, 128, 2}, 2048, dev);
  TestTensor q_t6 = TestTensor(DType::kBF16, {6, 4, 64}, dev);
  TestTensor out_f16 = TestTensor(DType::kF16, {4, 4, 64}, dev);
  TestTensor lse_bad = TestTensor(DType::kF32, {4, 3}, dev);
  TestTensor lse_bf16 = TestTensor(DType::kBF16, {4, 4}, dev);
  TestTensor topk_h1 = TestTensor(DType::kI32, {1, 4, 4}, dev);
  TestTensor topk_short = TestTensor(DType::kI32, {2, 3, 4}, dev);
  TestTensor topk_i64 = TestTensor(DType::kI64, {2, 4, 4}, dev);
  TestTensor bt_i64 = TestTensor(DType::kI64, {2, 5}, dev);
  TestTensor seq3 = TestTensor(DType::kI32, {3}, dev);
  TestTensor flags2 = TestTensor(DType::kI32, {2}, dev);
  const auto base = attn::decode_args(*b);
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  auto with = [&](auto mutate) {
    SparseAttentionDecodeArgs a = base;
    mutate(a);
    return a;
  };
  expect_rejected(*b, with([&](auto& a) { a.q = q3.view(); }), kInvalid, "Hq not a multiple");
  expect_rejected(*b, with([&](auto& a) { a.q = q_d32.view(); }), kInvalid, "head_dim");
  expect_rejected(*b, with([&](auto& a) { a.q = q_strided.view(); }), kInvalid, "q stride");
  expect_rejected(*b, with([&](auto& a) { a.q = q_t6.view(); }), kInvalid, "T != B * L");
  expect_rejected(*b, with([&](auto& a) { a.q.dtype = DType::kI32; }), kInvalid, "q dtype");
  expect_rejected(*b, with([&](auto& a) { a.out = out_f16.view(); }), kInvalid, "out dtype");
  expect_rejected(*b, with([&](auto& a) { a.out = q_t6.view(); }), kInvalid, "out shape");
  expect_rejected(*b, with([&](auto& a) { a.lse = lse_bad.view(); }), kInvalid, "lse shape");
  expect_rejected(*b, with([&](auto& a) { a.lse = lse_bf16.view(); }), kInvalid, "lse dtype");
  expect_rejected(*b, with([&](auto& a) { a.topk = topk_h1.view(); }), kInvalid, "topk heads");
  expect_rejected(*b, with([&](auto& a) { a.topk = topk_short.view(); }), kInvalid, "topk rows");
  expect_rejected(*b, with([&](auto& a) { a.topk = topk_i64.view(); }), kInvalid, "topk dtype");
  expect_rejected(*b, with([&](auto& a) { a.block_table = bt_i64.view(); }), kInvalid, "bt dtype");
  expect_rejected(*b, with([&](auto& a) { a.seq_lens = seq3.view(); }), kInvalid, "seq_lens");
  expect_rejected(*b, with([&](auto& a) { a.error_flags = flags2.view(); }), kInvalid, "flags");
  expect_rejected(*b, with([&](auto& a) { a.query_len = 9; }), kInvalid, "query_len 9");
  expect_rejected(*b, with([&](auto& a) { a.query_len = 0; }), kInvalid, "query_len 0");
  expect_rejected(*b, with([&](auto& a) { a.softmax_scale = NAN; }), kInvalid, "scale NaN");
  expect_rejected(*b, with([&](auto& a) { a.kv_cache.v.dtype = DType::kF16; }), kInvalid,
                  "v dtype");
  expect_rejected(*b, with([&](auto& a) { a.kv_cache.scale_mode = KvScaleMode::kPerLayer; }),
                  kInvalid, "scale mode on a bf16 cache");
  if (dev.is_cuda()) {
    TestTensor host_seq = TestTensor(DType::kI32, {2}, Device::cpu());
    expect_rejected(*b, with([&](auto& a) { a.seq_lens = host_seq.view(); }), kInvalid,
                    "device mismatch");
  }

  // Prefill: cu_seqlens_q shape.
  BatchSpec p = s;
  p.form = Form::kPrefill;
  p.query_lens = {3, 0};
  std::unique_ptr<Batch> pb = attn::make_batch(p, test::test_device());
  SparseAttentionPrefillArgs pa = attn::prefill_args(*pb);
  pa.cu_seqlens_q = seq3.view().slice(0, 0, 2);
  expect_rejected(*pb, pa, kInvalid, "cu_seqlens_q shape");
}

// Values inside tensors: the CPU returns kOutOfRange, writes nothing and sets the flag; CUDA
// skips the bad item and sets the flag.
template <typename Args>
void expect_value_error(Batch& b, const Args& args, int32_t bit, const std::string& what) {
  b.flags.set_flat(0, 0);
  b.flags.upload();
  if (b.device.is_cpu()) {
    expect_rejected(b, args, StatusCode::kOutOfRange, what);
  } else {
    const Status st = attn::run_op(args, b.device);
    EXPECT_TRUE(st.ok()) << what << ": " << st.to_string();
  }
  b.flags.download();
  EXPECT_EQ(static_cast<int32_t>(b.flags.get_flat(0)), bit) << what;
}

// Every check runs on a bf16 cache and on an e4m3 one with a per-layer scale, which CUDA serves
// with another kernel instance (the f16 path).
TEST(SparseAttention, RejectsBadValues) {
  MSA_REQUIRE_TEST_DEVICE();
  // Each CUDA kernel instance family: 16-bit K/V, e4m3 with a per-layer scale, e4m3 with
  // per-token-head scales; at head dim 64 the 4-warp kernel, at 128 the one-block kernel.
  const std::pair<DType, KvScaleMode> caches[] = {{DType::kBF16, KvScaleMode::kNone},
                                                  {DType::kE4M3, KvScaleMode::kPerLayer},
                                                  {DType::kE4M3, KvScaleMode::kPerTokenHead}};
  for (const int64_t head_dim : {64, 128})
    for (const auto& [cache, mode] : caches) {
      SCOPED_TRACE(std::string(dtype_name(cache)) + " cache, scale mode " +
                   std::to_string(static_cast<int>(mode)) + ", head dim " +
                   std::to_string(head_dim));
      BatchSpec s;
      s.num_q_heads = 4;
      s.head_dim = head_dim;
      s.query_len = 2;
      s.seq_lens = {300, 0, 200};
      s.topk_width = 4;
      s.cache_dtype = cache;
      s.scale_mode = mode;
      {
        std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
        attn::set_topk_row(*b, 0, 1, {0, 3});  // row 1 is at position 299: visible blocks 0..2
        expect_value_error(*b, attn::decode_args(*b), kDeviceErrorTopkId, "topk id beyond visible");
      }
      {
        std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
        attn::set_topk_row(*b, 0, 0, {1});
        b->block_table.set({0, 1}, 1 << 20);
        b->block_table.upload();
        expect_value_error(*b, attn::decode_args(*b), kDeviceErrorBlockId, "block id");
      }
      {
        std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
        b->seq_lens.set_flat(2, 128 * 5 + 1);  // the table has 3 + 2 columns
        b->seq_lens.upload();
        expect_value_error(*b, attn::decode_args(*b), kDeviceErrorSeqLen, "seq_len beyond table");
        b->seq_lens.set_flat(2, -5);
        b->seq_lens.upload();
        expect_value_error(*b, attn::decode_args(*b), kDeviceErrorSeqLen, "negative seq_len");
      }
      {
        BatchSpec p = s;
        p.form = Form::kPrefill;
        p.query_lens = {3, 0, 2};
        std::unique_ptr<Batch> b = attn::make_batch(p, test::test_device());
        b->cu_seqlens.set_flat(1, 4);
        b->cu_seqlens.set_flat(2, 2);  // decreasing
        b->cu_seqlens.upload();
        expect_value_error(*b, attn::prefill_args(*b), kDeviceErrorQueryLen, "cu_seqlens_q");
      }
      {
        BatchSpec p = s;
        p.form = Form::kPrefill;
        p.query_lens = {3, 0, 2};
        p.seq_lens = {300, 0, 1};  // 2 rows for 1 token
        std::unique_ptr<Batch> b = attn::make_batch(p, test::test_device());
        expect_value_error(*b, attn::prefill_args(*b), kDeviceErrorQueryLen, "rows > seq_len");
      }
    }
}

// The same checks on prefill shapes that CUDA runs on tensor cores (MSA_CUDA_PREFILL=tc in the
// CUDA suite): a bf16 cache read by bulk tensor copies, and an e4m3 one read from its per-call
// bf16 copy. A page outside the cache is dropped for every row and flagged by the producer that
// resolves it; a top-k id past the row's visible blocks by the walk's union.
TEST(SparseAttention, PrefillTensorCoreShapesRejectBadValues) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec bf16;
  bf16.form = Form::kPrefill;
  bf16.seq_lens = {1500, 700};
  bf16.query_lens = {600, 700};
  BatchSpec e4m3 = bf16;
  e4m3.cache_dtype = DType::kE4M3;
  e4m3.scale_mode = KvScaleMode::kPerLayer;
  for (const BatchSpec& s : {bf16, e4m3}) {
    SCOPED_TRACE(dtype_name(s.cache_dtype));
    {
      std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
      attn::set_topk_row(*b, 0, 0, {0, 1});  // row 0 of request 0 sits at position 900
      b->block_table.set({0, 1}, 1 << 20);
      b->block_table.upload();
      expect_value_error(*b, attn::prefill_args(*b), kDeviceErrorBlockId, "block id");
    }
    {
      std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
      attn::set_topk_row(*b, 0, 1, {7, 11});  // position 901: visible blocks 0..7
      expect_value_error(*b, attn::prefill_args(*b), kDeviceErrorTopkId, "topk id beyond visible");
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace msa
