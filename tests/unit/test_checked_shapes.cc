// Host checks against sizes that do not fit int64 and views that are not views (issue 39,
// items 1 and 2): every op's check() rejects them with kInvalidArgument naming the argument,
// and run() stops there, before reading any tensor. The tensors are stride-0 views of a few
// real elements, so a check that wrongly passed would let run() read past them.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "msa/attention.h"
#include "msa/fused_qknorm_rope.h"
#include "msa/indexer.h"
#include "msa/metadata.h"

namespace msa {
namespace {

constexpr int64_t kHuge = (int64_t{1} << 62) + 3;  // times 4 wraps to 12
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Expects kInvalidArgument naming `name` from check() and from run() (which must not get
// past check()).
template <typename Args>
void expect_invalid(const Args& args, const std::string& name) {
  const Status c = check(args);
  EXPECT_EQ(c.code(), StatusCode::kInvalidArgument) << c.to_string();
  EXPECT_NE(c.message().find(name), std::string::npos) << c.to_string();
  if (c.ok()) return;  // run() would read past the tensors
  const Status r = run(args, Workspace{}, Stream{nullptr, 1});
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument) << r.to_string();
}

struct Buffers {
  std::vector<int32_t> i32 = std::vector<int32_t>(4096, 0);
  std::vector<uint16_t> bf16 = std::vector<uint16_t>(4096, 0);
  std::vector<float> f32 = std::vector<float>(4096, 0.0f);
};

TEST(CheckedShapes, Page16RowCountOverflow) {
  // The case: num_requests * query_len = (2^62 + 3) * 4 wraps to 12.
  Buffers b;
  b.i32[0] = 4;  // seq_lens
  SparsePage16Args a;
  a.query_len = 4;
  a.block_size = 128;
  a.page_stride = 8;
  a.topk = make_tensor(b.i32.data(), DType::kI32, {1, 12, 16});
  a.block_table = make_strided_tensor(b.i32.data(), DType::kI32, {kHuge, 1}, {0, 1});
  a.seq_lens = make_strided_tensor(b.i32.data(), DType::kI32, {kHuge}, {0});
  a.table_out = make_tensor(b.i32.data(), DType::kI32, {12, 128});
  a.context_lens_out = make_tensor(b.i32.data(), DType::kI32, {12});
  expect_invalid(a, "block_table");
}

TEST(CheckedShapes, Page16TableSizeOverflow) {
  Buffers b;
  SparsePage16Args a;
  a.query_len = 1;
  a.topk = make_strided_tensor(b.i32.data(), DType::kI32, {1, 1, kMax / 4}, {0, 0, 0});
  a.block_table = make_tensor(b.i32.data(), DType::kI32, {1, 1});
  a.seq_lens = make_tensor(b.i32.data(), DType::kI32, {1});
  a.table_out = make_tensor(b.i32.data(), DType::kI32, {1, 8});
  a.context_lens_out = make_tensor(b.i32.data(), DType::kI32, {1});
  expect_invalid(a, "topk");
  // Page-16 ids are int32: more KV heads than 2^31 / page_stride cannot be numbered.
  a.topk = make_strided_tensor(b.i32.data(), DType::kI32, {int64_t{1} << 30, 0, 1}, {0, 0, 1});
  a.block_table = make_tensor(b.i32.data(), DType::kI32, {0, 1});
  a.seq_lens = make_tensor(b.i32.data(), DType::kI32, {0});
  a.table_out = make_tensor(b.i32.data(), DType::kI32, {0, 8});
  a.context_lens_out = make_tensor(b.i32.data(), DType::kI32, {0});
  expect_invalid(a, "topk: shape[0] (num_kv_heads)");
}

TEST(CheckedShapes, IndexTopkDecodeRowCountOverflow) {
  Buffers b;
  IndexTopkDecodeArgs a;
  a.query_len = 4;
  a.index_q = make_tensor(b.bf16.data(), DType::kBF16, {12, 1, 16});
  a.index_cache = make_tensor(b.bf16.data(), DType::kBF16, {1, 16, 16});
  a.block_table = make_strided_tensor(b.i32.data(), DType::kI32, {kHuge, 1}, {0, 1});
  a.seq_lens = make_strided_tensor(b.i32.data(), DType::kI32, {kHuge}, {0});
  a.topk_out = make_tensor(b.i32.data(), DType::kI32, {1, 12, 16});
  expect_invalid(a, "seq_lens");
}

TEST(CheckedShapes, IndexCacheSlotOverflow) {
  Buffers b;
  IndexTopkPrefillArgs a;
  a.index_q = make_tensor(b.bf16.data(), DType::kBF16, {1, 1, 16});
  a.index_cache = make_strided_tensor(b.bf16.data(), DType::kBF16, {kMax, 4, 16}, {0, 0, 1});
  a.block_table = make_tensor(b.i32.data(), DType::kI32, {1, 1});
  a.cu_seqlens_q = make_tensor(b.i32.data(), DType::kI32, {2});
  a.seq_lens = make_tensor(b.i32.data(), DType::kI32, {1});
  a.topk_out = make_tensor(b.i32.data(), DType::kI32, {1, 1, 16});
  expect_invalid(a, "index_cache: num_blocks * block_size");
}

TEST(CheckedShapes, IndexTopkWorkspaceOverflow) {
  // head_dim 2^61: index_q and the cache span 2^62 bytes each (their data is never read),
  // the CPU scratch of 64 threads would need 2^69.
  Buffers b;
  IndexTopkDecodeArgs a;
  const int64_t d = int64_t{1} << 61;
  a.index_q = make_strided_tensor(b.bf16.data(), DType::kBF16, {1, 1, d}, {0, 0, 1});
  a.index_cache = make_strided_tensor(b.bf16.data(), DType::kBF16, {1, 16, d}, {0, 0, 1});
  a.block_table = make_tensor(b.i32.data(), DType::kI32, {1, 1});
  a.seq_lens = make_tensor(b.i32.data(), DType::kI32, {1});
  a.topk_out = make_tensor(b.i32.data(), DType::kI32, {1, 1, 16});
  ASSERT_TRUE(check(a).ok());
  size_t bytes = 0;
  const Status s = workspace_size(a, &bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string() << " bytes " << bytes;
  EXPECT_EQ(run(a, Workspace{b.f32.data(), 4096}, Stream{}).code(), StatusCode::kInvalidArgument);
}

// A bf16 packed-layout cache view [num_blocks, 1, block_size, 2 * 64] over a few elements.
KvCacheView stride0_cache(uint16_t* data, int64_t num_blocks, int64_t block_size) {
  KvCacheView kv;
  kv.k = make_strided_tensor(data, DType::kBF16, {num_blocks, 1, block_size, 64}, {0, 0, 0, 1});
  kv.v = kv.k;
  return kv;
}

TEST(CheckedShapes, AttentionRowCountAndSlotOverflow) {
  Buffers b;
  SparseAttentionDecodeArgs a;
  a.query_len = 4;
  a.q = make_tensor(b.bf16.data(), DType::kBF16, {12, 1, 64});
  a.kv_cache = stride0_cache(b.bf16.data(), 1, 16);
  a.block_table = make_strided_tensor(b.i32.data(), DType::kI32, {kHuge, 1}, {0, 1});
  a.seq_lens = make_strided_tensor(b.i32.data(), DType::kI32, {kHuge}, {0});
  a.topk = make_tensor(b.i32.data(), DType::kI32, {1, 12, 16});
  a.out = make_tensor(b.bf16.data(), DType::kBF16, {12, 1, 64});
  expect_invalid(a, "block_table");

  // num_blocks * block_size of the cache (per-token-head scales are indexed by slot).
  DenseAttentionArgs d;
  d.q = make_tensor(b.bf16.data(), DType::kBF16, {1, 1, 64});
  d.kv_cache = stride0_cache(b.bf16.data(), kMax / 2, 16);
  d.block_table = make_tensor(b.i32.data(), DType::kI32, {1, 1});
  d.cu_seqlens_q = make_tensor(b.i32.data(), DType::kI32, {2});
  d.seq_lens = make_tensor(b.i32.data(), DType::kI32, {1});
  d.out = make_tensor(b.bf16.data(), DType::kBF16, {1, 1, 64});
  expect_invalid(d, "kv_cache.k: num_blocks * block_size");

  // T * num_q_heads (the CPU backend's work items).
  d.kv_cache = stride0_cache(b.bf16.data(), 1, 16);
  d.q = make_strided_tensor(b.bf16.data(), DType::kBF16, {kMax / 2, 4, 64}, {0, 0, 1});
  d.out = d.q;
  expect_invalid(d, "q: T * num_q_heads");
}

TEST(CheckedShapes, AttentionWorkspaceOverflow) {
  // block_size 2^61: the CPU scratch holds a block of fp32 V rows per thread.
  Buffers b;
  DenseAttentionArgs d;
  d.q = make_tensor(b.bf16.data(), DType::kBF16, {1, 1, 64});
  d.kv_cache = stride0_cache(b.bf16.data(), 1, int64_t{1} << 61);
  d.block_table = make_tensor(b.i32.data(), DType::kI32, {1, 1});
  d.cu_seqlens_q = make_tensor(b.i32.data(), DType::kI32, {2});
  d.seq_lens = make_tensor(b.i32.data(), DType::kI32, {1});
  d.out = make_tensor(b.bf16.data(), DType::kBF16, {1, 1, 64});
  ASSERT_TRUE(check(d).ok());
  size_t bytes = 0;
  const Status s = workspace_size(d, &bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string() << " bytes " << bytes;
  EXPECT_EQ(run(d, Workspace{b.f32.data(), 4096}, Stream{}).code(), StatusCode::kInvalidArgument);
}

TEST(CheckedShapes, MetadataBatchOverflow) {
  Buffers b;
  BatchMetadataArgs a;
  a.query_lens = make_strided_tensor(b.i32.data(), DType::kI32, {kMax}, {0});
  a.seq_lens = a.query_lens;
  expect_invalid(a, "query_lens: B + 1");
  size_t bytes = 0;
  a.query_lens = make_strided_tensor(b.i32.data(), DType::kI32, {kMax / 4}, {0});
  a.seq_lens = a.query_lens;
  ASSERT_TRUE(check(a).ok());
  EXPECT_EQ(workspace_size(a, &bytes).code(), StatusCode::kInvalidArgument);
}

TEST(CheckedShapes, FusedRowWidthOverflow) {
  Buffers b;
  FusedQkNormRopeArgs a;
  a.mode = PreAttentionMode::kDense;
  a.num_q_heads = 16;
  a.num_kv_heads = 1;
  a.rotary_dim = 64;
  a.qkv = make_tensor(b.bf16.data(), DType::kBF16, {1, 16});
  // head_dim 2^60 from the weight (a stride-0 view): (16 + 2) * 2^60 does not fit int64.
  a.q_norm_weight = make_strided_tensor(b.f32.data(), DType::kF32, {int64_t{1} << 60}, {0});
  a.k_norm_weight = a.q_norm_weight;
  a.positions = make_tensor(b.i32.data(), DType::kI32, {1});
  a.cos_sin_cache = make_tensor(b.f32.data(), DType::kF32, {1, 64});
  expect_invalid(a, "q_norm_weight");
}

TEST(CheckedShapes, ViewExtentOverflow) {
  // [2^62, 4] f32 with row-major strides spans 2^66 bytes: no memory backs it.
  Buffers b;
  RopeCacheArgs a;
  a.cos_sin_out = make_strided_tensor(b.f32.data(), DType::kF32, {int64_t{1} << 62, 4}, {4, 1});
  expect_invalid(a, "cos_sin_out");
  a.cos_sin_out = make_strided_tensor(b.f32.data(), DType::kF32, {kMax, 2}, {kMax, 1});
  expect_invalid(a, "cos_sin_out");
}

TEST(CheckedShapes, InvalidViewsAreRejected) {
  Buffers b;
  RopeCacheArgs a;
  // Seven dimensions: make_tensor marks the view invalid, the check says so.
  a.cos_sin_out = make_tensor(b.f32.data(), DType::kF32, {1, 1, 1, 1, 1, 1, 2});
  expect_invalid(a, "cos_sin_out: ndim -1 outside [0, 6]");
  // A rank far past kMaxDims set by hand is not read past the arrays for the message.
  a.cos_sin_out = make_tensor(b.f32.data(), DType::kF32, {4, 2});
  a.cos_sin_out.ndim = 100000;
  expect_invalid(a, "cos_sin_out: ndim 100000 outside [0, 6]");
  a.cos_sin_out.ndim = -5;
  expect_invalid(a, "cos_sin_out: ndim -5 outside [0, 6]");
  // An unknown device type or a negative ordinal.
  a.cos_sin_out = make_tensor(b.f32.data(), DType::kF32, {4, 2});
  a.cos_sin_out.device.type = static_cast<DeviceType>(7);
  expect_invalid(a, "cos_sin_out: device type 7");
  a.cos_sin_out.device = Device::cuda(-1);
  expect_invalid(a, "cos_sin_out: device type 1 index -1");

  // An optional tensor built with too many dimensions is rejected, not taken as absent.
  DenseAttentionArgs d;
  d.q = make_tensor(b.bf16.data(), DType::kBF16, {1, 1, 64});
  d.kv_cache = stride0_cache(b.bf16.data(), 1, 16);
  d.block_table = make_tensor(b.i32.data(), DType::kI32, {1, 1});
  d.cu_seqlens_q = make_tensor(b.i32.data(), DType::kI32, {2});
  d.seq_lens = make_tensor(b.i32.data(), DType::kI32, {1});
  d.out = make_tensor(b.bf16.data(), DType::kBF16, {1, 1, 64});
  ASSERT_TRUE(check(d).ok());
  d.lse = make_tensor(b.f32.data(), DType::kF32, {1, 1, 1, 1, 1, 1, 1});
  expect_invalid(d, "lse: ndim -1");
  d.lse = TensorView();
  d.error_flags = make_strided_tensor(b.i32.data(), DType::kI32, {1}, {1, 1});
  expect_invalid(d, "error_flags: ndim -1");

  // An unknown KV scale mode.
  d.error_flags = TensorView();
  d.kv_cache.scale_mode = static_cast<KvScaleMode>(9);
  expect_invalid(d, "kv_cache.scale_mode: 9");
}

}  // namespace
}  // namespace msa
