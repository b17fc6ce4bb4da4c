// Dense causal GQA attention over the paged cache (layers 0-2) on the binary's test device
// against the float64 oracle; on CUDA also against the CPU backend. Covers prefill rows with
// prefixes and padding, decode batches in prefill form, TP head presets, cache layouts, e4m3
// scale modes, thread-count invariance and bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <ostream>
#include <string>
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

std::vector<NamedSpec> dense_specs() {
  std::vector<NamedSpec> v;
  {
    BatchSpec s;  // chunked prefill with prefixes, a request without rows, padding rows
    s.num_q_heads = 8;
    s.seq_lens = {2049, 129, 40, 128};
    s.query_lens = {3, 129, 0, 2};
    s.padding_rows = 2;
    v.push_back({"ChunkedTp8Packed", s});
  }
  {
    BatchSpec s;  // a decode batch in prefill form, TP1 heads, split NHD, bf16 output
    s.num_q_heads = 64;
    s.num_kv_heads = 4;
    s.seq_lens = {1, 127, 128, 260};
    s.query_lens = {1, 1, 1, 1};
    s.layout = Layout::kSplitNhd;
    s.out_dtype = DType::kBF16;
    s.seed = 2;
    v.push_back({"DecodeBatchTp1NhdBf16Out", s});
  }
  {
    BatchSpec s;  // one decode row at a long context (CUDA: over a hundred splits) and a short
                  // request, NaN past the lengths
    s.seq_lens = {30000, 2000};
    s.query_lens = {1, 2};
    s.nan_past_len = true;
    s.seed = 14;
    v.push_back({"DecodeLongContextManySplits", s});
  }
  {
    BatchSpec s;  // TP2 heads, HND, e4m3 per-token-head, speculative-style rows
    s.num_q_heads = 32;
    s.num_kv_heads = 2;
    s.head_dim = 64;
    s.seq_lens = {300, 4, 2048};
    s.query_lens = {4, 4, 4};
    s.layout = Layout::kSplitHnd;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.with_lse = false;
    s.seed = 3;
    v.push_back({"Tp2HndE4m3PerTokenHead", s});
  }
  {
    BatchSpec s;  // TP4 heads, e4m3 per-layer, f32 q
    s.seq_lens = {500, 77};
    s.query_lens = {20, 77};
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.q_dtype = DType::kF32;
    s.seed = 4;
    v.push_back({"Tp4PackedE4m3PerLayer", s});
  }
  {
    BatchSpec s;  // e4m3 without scale, f16 q and output, explicit scale
    s.num_q_heads = 8;
    s.seq_lens = {1000};
    s.query_lens = {5};
    s.padding_rows = 1;
    s.cache_dtype = DType::kE4M3;
    s.q_dtype = DType::kF16;
    s.out_dtype = DType::kF16;
    s.softmax_scale = 0.03f;
    s.seed = 5;
    v.push_back({"E4m3NoneF16", s});
  }
  {
    BatchSpec s;  // f16 decode rows (CUDA: the tensor-core split-KV kernel's f16 instance), a
                  // negative softmax scale, NaN past the lengths
    s.seq_lens = {5000, 64, 700};
    s.query_lens = {1, 1, 3};
    s.cache_dtype = DType::kF16;
    s.q_dtype = DType::kF16;
    s.out_dtype = DType::kF16;
    s.softmax_scale = -0.06f;
    s.nan_past_len = true;
    s.seed = 15;
    v.push_back({"DecodeF16NegativeScale", s});
  }
  {
    BatchSpec s;  // e4m3 decode rows with per-layer scales and bf16 q (CUDA: the tensor-core
                  // split-KV kernel's e4m3 instance), many splits, NaN past the lengths, HND
    s.seq_lens = {20000, 129, 3000};
    s.query_lens = {1, 2, 1};
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.layout = Layout::kSplitHnd;
    s.nan_past_len = true;
    s.seed = 16;
    v.push_back({"DecodeE4m3PerLayerHnd", s});
  }
  {
    // A speculative decode batch in prefill form (spec A8): padded requests (seq_len 0) keep
    // their L rows, which attend to nothing.
    BatchSpec s;
    s.num_q_heads = 8;
    s.seq_lens = {0, 300, 0, 4};
    s.query_lens = {4, 4, 4, 4};
    s.seed = 8;
    v.push_back({"DecodeBatchWithPaddedRequests", s});
  }
  {
    // NaN in every slot past each request's length (K, V and scales): never visible, so the
    // outputs must not change. bf16, and e4m3 with per-token-head scales.
    BatchSpec s;
    s.seq_lens = {2049, 130, 77};
    s.query_lens = {3, 130, 1};
    s.nan_past_len = true;
    s.seed = 6;
    v.push_back({"NanPastLengthBf16", s});
    s.num_q_heads = 8;
    s.seq_lens = {1001, 300};
    s.query_lens = {4, 2};
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.seed = 7;
    v.push_back({"NanPastLengthE4m3PerToken", s});
  }
  // Shapes the CUDA backend runs on tensor cores (see test_sparse_attention.cc).
  {
    BatchSpec s;
    s.seq_lens = {700, 1500 + 150, 129};
    s.query_lens = {300, 150, 129};
    s.padding_rows = 3;
    s.nan_past_len = true;
    s.seed = 41;
    v.push_back({"TensorCoreBf16PackedNanPastLength", s});
  }
  {
    BatchSpec s;
    s.seq_lens = {500, 133 + 600};
    s.query_lens = {200, 133};
    s.layout = Layout::kSplitHnd;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.out_dtype = DType::kBF16;
    s.nan_past_len = true;
    s.seed = 42;
    v.push_back({"TensorCoreE4m3PerLayerHnd", s});
  }
  {
    BatchSpec s;
    s.seq_lens = {640, 150 + 400};
    s.query_lens = {260, 150};
    s.layout = Layout::kSplitNhd;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.out_dtype = DType::kBF16;
    s.nan_past_len = true;
    s.seed = 147;
    v.push_back({"TensorCoreE4m3PerTokenHeadNhd", s});
  }
  {
    BatchSpec s;  // TP8 heads, f16
    s.num_q_heads = 8;
    s.seq_lens = {600, 260};
    s.query_lens = {200, 100};
    s.layout = Layout::kSplitNhd;
    s.cache_dtype = DType::kF16;
    s.q_dtype = DType::kF16;
    s.seed = 43;
    v.push_back({"TensorCoreTp8F16Nhd", s});
  }
  {
    BatchSpec s;  // TP2 heads
    s.num_q_heads = 32;
    s.num_kv_heads = 2;
    s.seq_lens = {500, 300};
    s.query_lens = {100, 300};
    s.seed = 44;
    v.push_back({"TensorCoreTp2", s});
  }
  {
    // A negative softmax scale (the tensor-core kernels negate Q and use its magnitude), with a
    // per-layer e4m3 scale folded into it on the second case.
    BatchSpec s;
    s.seq_lens = {700, 150 + 300};
    s.query_lens = {300, 150};
    s.softmax_scale = -0.07f;
    s.seed = 45;
    v.push_back({"TensorCoreNegativeScale", s});
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.out_dtype = DType::kBF16;
    s.seed = 46;
    v.push_back({"TensorCoreNegativeScaleE4m3", s});
  }
  // On CUDA the e4m3 tensor-core cases above hold at least 8 query rows per block-table page and
  // take the per-call bf16 copy of their pages; these take it with two KV heads and two requests,
  // and keep the per-tile conversion (short chunks after long prefixes: more pages than rows / 8).
  {
    BatchSpec s;
    s.num_kv_heads = 2;
    s.seq_lens = {530, 600};
    s.query_lens = {300, 300};
    s.layout = Layout::kSplitNhd;
    s.cache_dtype = DType::kE4M3;
    s.scale_mode = KvScaleMode::kPerTokenHead;
    s.out_dtype = DType::kBF16;
    s.nan_past_len = true;
    s.seed = 48;
    v.push_back({"TensorCoreE4m3CopyTwoKvHeadsNhd", s});
    s.num_kv_heads = 1;
    s.seq_lens = {2600, 900};
    s.query_lens = {200, 100};
    s.seed = 49;
    v.push_back({"TensorCoreE4m3PerTileLongPrefixNhd", s});
    s.seq_lens = {3000};
    s.query_lens = {150};
    s.layout = Layout::kSplitHnd;
    s.scale_mode = KvScaleMode::kPerLayer;
    s.seed = 50;
    v.push_back({"TensorCoreE4m3PerTileLongPrefixHnd", s});
  }
  return v;
}

class DenseAttentionCases : public ::testing::TestWithParam<NamedSpec> {};

TEST_P(DenseAttentionCases, MatchesOracle) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s = GetParam().spec;
  s.form = Form::kDense;
  attn::check_against_oracle(s);
}

INSTANTIATE_TEST_SUITE_P(DenseAttention, DenseAttentionCases, ::testing::ValuesIn(dense_specs()),
                         [](const ::testing::TestParamInfo<NamedSpec>& i) { return i.param.name; });

TEST(DenseAttention, DeterministicAcrossThreadCounts) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.form = Form::kDense;
  s.num_q_heads = 16;
  s.seq_lens = {600, 131};
  s.query_lens = {7, 131};
  s.padding_rows = 2;
  s.seed = 11;
  std::unique_ptr<Batch> ref = attn::make_batch(s, test::test_device());
  ASSERT_TRUE(attn::run_batch(*ref, Stream{nullptr, 1}).ok());
  for (int threads : {2, 8}) {
    std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
    ASSERT_TRUE(attn::run_batch(*b, Stream{nullptr, threads}).ok());
    EXPECT_TRUE(attn::same_bytes(ref->out, b->out)) << threads << " threads: out differs";
    EXPECT_TRUE(attn::same_bytes(ref->lse, b->lse)) << threads << " threads: lse differs";
  }
}

TEST(DenseAttention, PaddedDecodeRequestAttendsToNothing) {
  MSA_REQUIRE_TEST_DEVICE();
  // cu_seqlens_q [0, 1], seq_lens [0]: one padded decode request of one row.
  BatchSpec s;
  s.form = Form::kDense;
  s.num_q_heads = 4;
  s.head_dim = 64;
  s.seq_lens = {0};
  s.query_lens = {1};
  std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
  const Status st = attn::run_batch(*b);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(b->flags.get_flat(0), 0);
  for (int64_t i = 0; i < b->out.numel(); ++i) ASSERT_EQ(b->out.get_flat(i), 0.0) << i;
  for (int64_t i = 0; i < b->lse.numel(); ++i) {
    ASSERT_TRUE(std::isinf(b->lse.get_flat(i)) && b->lse.get_flat(i) < 0) << i;
  }
}

// Uploads a known pattern into out and lse, runs `args`, checks the status code and, on the CPU
// or for host-detected errors, that the outputs kept their pattern.
void expect_rejected(Batch& b, const DenseAttentionArgs& args, StatusCode code,
                     const std::string& what) {
  b.out.fill_bytes(0x3C);
  b.out.upload();
  b.lse.fill_bytes(0x3C);
  b.lse.upload();
  b.flags.set_flat(0, 0);
  b.flags.upload();
  const Status st = attn::run_op(args, b.device);
  EXPECT_EQ(st.code(), code) << what << ": " << st.to_string();
  b.out.download();
  b.lse.download();
  bool unchanged = true;
  for (uint8_t x : b.out.host_bytes()) unchanged = unchanged && x == 0x3C;
  for (uint8_t x : b.lse.host_bytes()) unchanged = unchanged && x == 0x3C;
  EXPECT_TRUE(unchanged) << what << ": outputs were written";
}

TEST(DenseAttention, RejectsBadArguments) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.form = Form::kDense;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.seq_lens = {300, 10};
  s.query_lens = {3, 1};
  std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
  const Device dev = b->device;
  TestTensor q3 = TestTensor(DType::kBF16, {4, 3, 64}, dev);
  TestTensor out_f16 = TestTensor(DType::kF16, {4, 4, 64}, dev);
  TestTensor cu2 = TestTensor(DType::kI32, {2}, dev);
  TestTensor bt1 = TestTensor(DType::kI32, {5}, dev);
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  DenseAttentionArgs a = attn::dense_args(*b);
  a.q = q3.view();
  expect_rejected(*b, a, kInvalid, "Hq not a multiple of Hkv");
  a = attn::dense_args(*b);
  a.out = out_f16.view();
  expect_rejected(*b, a, kInvalid, "out dtype");
  a = attn::dense_args(*b);
  a.cu_seqlens_q = cu2.view();
  expect_rejected(*b, a, kInvalid, "cu_seqlens_q shape");
  a = attn::dense_args(*b);
  a.block_table = bt1.view();
  expect_rejected(*b, a, kInvalid, "block_table rank");
  a = attn::dense_args(*b);
  a.kv_cache.k.strides[3] = 2;
  expect_rejected(*b, a, kInvalid, "cache stride");
}

// A dense call that CUDA runs on the tensor-core kernel over a per-call bf16 copy of its e4m3
// cache (8 rows or more per block-table page).
BatchSpec e4m3_copy_spec() {
  BatchSpec s;
  s.form = Form::kDense;
  s.seq_lens = {700, 10};
  s.query_lens = {300, 1};
  s.cache_dtype = DType::kE4M3;
  s.scale_mode = KvScaleMode::kPerLayer;
  return s;
}

// Bad values on the split-KV kernels (few rows per request: on CUDA the CUDA-core kernel at head
// dim 64, the m16n8k16 one at 128 over bf16 and over e4m3 with a per-layer scale) and, on CUDA,
// on the tensor-core prefill kernel over a per-call bf16 copy of an e4m3 cache.
TEST(DenseAttention, RejectsBadValues) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec split;
  split.form = Form::kDense;
  split.num_q_heads = 4;
  split.head_dim = 64;
  split.seq_lens = {300, 10};
  split.query_lens = {3, 1};
  BatchSpec split_mma = split;
  split_mma.head_dim = 128;
  BatchSpec split_mma_e4m3 = split_mma;
  split_mma_e4m3.cache_dtype = DType::kE4M3;
  split_mma_e4m3.scale_mode = KvScaleMode::kPerLayer;
  struct Spec {
    const char* name;
    BatchSpec spec;
  };
  const Spec specs[] = {{"split, head dim 64", split},
                        {"split, head dim 128", split_mma},
                        {"split, head dim 128, e4m3", split_mma_e4m3},
                        {"e4m3 copy", e4m3_copy_spec()}};
  struct Case {
    const char* what;
    int64_t bt_col;    // block-table entry of request 0 to break, or -1
    int64_t seq_len0;  // 0: past the block table
    int32_t bit;
  };
  for (const Spec& sp : specs) {
    const BatchSpec& s = sp.spec;
    for (const Case& c : {Case{"block id", 1, s.seq_lens[0], kDeviceErrorBlockId},
                          Case{"seq_len beyond table", -1, 0, kDeviceErrorSeqLen},
                          Case{"rows > seq_len", -1, 2, kDeviceErrorQueryLen}}) {
      SCOPED_TRACE(std::string(c.what) + ", " + sp.name);
      std::unique_ptr<Batch> b = attn::make_batch(s, test::test_device());
      if (c.bt_col >= 0) {
        b->block_table.set({0, c.bt_col}, -3);
        b->block_table.upload();
      }
      const int64_t past_table = 128 * b->block_table.shape()[1] + 1;
      b->seq_lens.set_flat(0, static_cast<double>(c.seq_len0 > 0 ? c.seq_len0 : past_table));
      b->seq_lens.upload();
      if (b->device.is_cpu()) {
        expect_rejected(*b, attn::dense_args(*b), StatusCode::kOutOfRange, c.what);
      } else {
        b->flags.set_flat(0, 0);
        b->flags.upload();
        const Status st = attn::run_op(attn::dense_args(*b), b->device);
        EXPECT_TRUE(st.ok()) << c.what << ": " << st.to_string();
      }
      b->flags.download();
      EXPECT_EQ(static_cast<int32_t>(b->flags.get_flat(0)), c.bit) << c.what;
    }
  }
}

// On CUDA, a call that reads the per-call bf16 copy of an e4m3 cache (bulk tensor copies) needs
// the workspace aligned to 256 bytes as Workspace documents: a misaligned one is rejected before
// anything is written. The CPU backend has no such copy.
TEST(DenseAttention, CopyPathRejectsMisalignedWorkspace) {
  MSA_REQUIRE_TEST_DEVICE();
  if (test::test_device().is_cpu()) GTEST_SKIP() << "no per-call copy on the CPU backend";
  std::unique_ptr<Batch> b = attn::make_batch(e4m3_copy_spec(), test::test_device());
  b->out.fill_bytes(0x3C);
  b->out.upload();
  const DenseAttentionArgs a = attn::dense_args(*b);
  size_t bytes = 0;
  ASSERT_TRUE(workspace_size(a, &bytes).ok());
  attn::DeviceBuffer buffer(b->device, bytes + 256);
  const Workspace ws{static_cast<char*>(buffer.workspace().data) + 16, bytes};
  const Status st = run(a, ws, Stream());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.to_string().find("aligned to 256 bytes"), std::string::npos) << st.to_string();
  b->out.download();
  bool unchanged = true;
  for (uint8_t x : b->out.host_bytes()) unchanged = unchanged && x == 0x3C;
  EXPECT_TRUE(unchanged) << "outputs were written";
}

}  // namespace
}  // namespace test
}  // namespace msa
