// CUDA-only API contract checks: tensors of one call on different devices are rejected, a
// workspace below workspace_size() is rejected, caches the sparse attention and indexer kernels
// cannot address and token counts the fused op's grid cannot hold are declined, and a bad slot in
// the fused op is skipped and flagged while the rest of the call completes.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/test_tensor.h"
#include "msa/attention.h"
#include "msa/cache.h"
#include "msa/fused_qknorm_rope.h"
#include "msa/indexer.h"
#include "msa/metadata.h"
#include "ops/attention_cases.h"

namespace msa {
namespace test {
namespace {

attn::BatchSpec small_decode_spec() {
  attn::BatchSpec s;
  s.form = attn::Form::kDecode;
  s.num_q_heads = 16;
  s.num_kv_heads = 1;
  s.query_len = 1;
  s.seq_lens = {300, 0, 129};
  return s;
}

attn::BatchSpec small_dense_spec() {
  attn::BatchSpec s;
  s.form = attn::Form::kDense;
  s.num_q_heads = 8;
  s.num_kv_heads = 2;
  s.seq_lens = {200, 9};
  s.query_lens = {3, 9};
  return s;
}

// A small metadata call on the test device: 2 decode requests (L = 1) and 1 prefill.
struct MetadataCall {
  TestTensor query_lens{DType::kI32, {3}, test_device()};
  TestTensor seq_lens{DType::kI32, {3}, test_device()};
  TestTensor block_table{DType::kI32, {3, 4}, test_device()};
  TestTensor slots{DType::kI64, {16}, test_device()};
  TestTensor flags{DType::kI32, {1}, test_device()};
  BatchMetadataArgs args;

  MetadataCall() {
    const int64_t q[3] = {1, 1, 4}, s[3] = {10, 300, 40};
    for (int64_t i = 0; i < 3; ++i) {
      query_lens.set_flat(i, static_cast<double>(q[i]));
      seq_lens.set_flat(i, static_cast<double>(s[i]));
    }
    for (int64_t i = 0; i < 12; ++i) block_table.set_flat(i, static_cast<double>(i));
    for (TestTensor* t : {&query_lens, &seq_lens, &block_table, &flags}) t->upload();
    args.num_decode_requests = 2;
    args.decode_query_len = 1;
    args.block_size = 128;
    args.query_lens = query_lens.view();
    args.seq_lens = seq_lens.view();
    args.block_table = block_table.view();
    args.slot_mapping = slots.view();
    args.error_flags = flags.view();
  }
};

void expect_code(const Status& st, StatusCode code, const std::string& what) {
  EXPECT_EQ(st.code(), code) << what << ": " << st.to_string();
}

TEST(CudaMisc, MixedDevicesRejected) {
  MSA_REQUIRE_TEST_DEVICE();
  ASSERT_TRUE(test_device().is_cuda());
  TestTensor host_lens(DType::kI32, {3}, Device::cpu());
  TestTensor host_cu(DType::kI32, {3}, Device::cpu());
  TestTensor host_flags(DType::kI32, {1}, Device::cpu());

  std::unique_ptr<attn::Batch> d = attn::make_batch(small_decode_spec(), test_device());
  SparseAttentionDecodeArgs da = attn::decode_args(*d);
  da.seq_lens = host_lens.view();
  expect_code(attn::run_op(da, test_device()), StatusCode::kInvalidArgument,
              "sparse decode with seq_lens on the CPU");
  da = attn::decode_args(*d);
  da.error_flags = host_flags.view();
  expect_code(attn::run_op(da, test_device()), StatusCode::kInvalidArgument,
              "sparse decode with error_flags on the CPU");

  std::unique_ptr<attn::Batch> n = attn::make_batch(small_dense_spec(), test_device());
  DenseAttentionArgs na = attn::dense_args(*n);
  na.cu_seqlens_q = host_cu.view();
  expect_code(attn::run_op(na, test_device()), StatusCode::kInvalidArgument,
              "dense attention with cu_seqlens_q on the CPU");

  SparsePage16Args pa;
  TestTensor table(DType::kI32, {d->rows, 16 * 8}, test_device());
  TestTensor ctx(DType::kI32, {d->rows}, Device::cpu());
  pa.topk = d->topk.view();
  pa.block_table = d->block_table.view();
  pa.seq_lens = d->seq_lens.view();
  pa.table_out = table.view();
  pa.context_lens_out = ctx.view();
  expect_code(attn::run_op(pa, test_device()), StatusCode::kInvalidArgument,
              "page16 with context_lens_out on the CPU");

  MetadataCall m;
  m.args.seq_lens = host_lens.view();
  expect_code(attn::run_op(m.args, test_device()), StatusCode::kInvalidArgument,
              "metadata with seq_lens on the CPU");

  // The fused op with its positions on the CPU.
  TestTensor qkv(DType::kBF16, {2, 4 * 128}, test_device());
  TestTensor positions(DType::kI64, {2}, Device::cpu());
  TestTensor cos_sin(DType::kF32, {16, 64}, test_device());
  TestTensor w(DType::kF32, {128}, test_device());
  FusedQkNormRopeArgs fa;
  fa.mode = PreAttentionMode::kDense;
  fa.num_q_heads = 2;
  fa.num_kv_heads = 1;
  fa.qkv = qkv.view();
  fa.positions = positions.view();
  fa.cos_sin_cache = cos_sin.view();
  fa.q_norm_weight = w.view();
  fa.k_norm_weight = w.view();
  expect_code(attn::run_op(fa, test_device()), StatusCode::kInvalidArgument,
              "fused op with positions on the CPU");
}

// For an op whose CUDA workspace is not empty: one byte short, and a null workspace, are both
// kWorkspaceTooSmall. Returns false when the op needs no workspace.
template <typename Args>
bool expect_workspace_checked(const Args& args, const std::string& what) {
  size_t bytes = 0;
  const Status st = workspace_size(args, &bytes);
  EXPECT_TRUE(st.ok()) << what << ": " << st.to_string();
  if (bytes == 0) return false;
  attn::DeviceBuffer buffer(test_device(), bytes);
  Workspace ws = buffer.workspace();
  ws.bytes = bytes - 1;
  expect_code(run(args, ws, Stream{}), StatusCode::kWorkspaceTooSmall, what + " (one byte short)");
  expect_code(run(args, Workspace{}, Stream{}), StatusCode::kWorkspaceTooSmall,
              what + " (no workspace)");
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return true;
}

TEST(CudaMisc, WorkspaceTooSmall) {
  MSA_REQUIRE_TEST_DEVICE();
  // The metadata op keeps per-request offsets in its workspace, so it always needs one.
  MetadataCall m;
  EXPECT_TRUE(expect_workspace_checked(m.args, "batch metadata"));

  std::unique_ptr<attn::Batch> d = attn::make_batch(small_decode_spec(), test_device());
  expect_workspace_checked(attn::decode_args(*d), "sparse decode");
  std::unique_ptr<attn::Batch> n = attn::make_batch(small_dense_spec(), test_device());
  expect_workspace_checked(attn::dense_args(*n), "dense attention");

  TestTensor index_q(DType::kBF16, {3, 1, 128}, test_device());
  TestTensor index_cache(DType::kBF16, {8, 128, 128}, test_device());
  TestTensor topk_out(DType::kI32, {1, 3, 16}, test_device());
  IndexTopkDecodeArgs ia;
  ia.index_q = index_q.view();
  ia.index_cache = index_cache.view();
  ia.block_table = d->block_table.view();
  ia.seq_lens = d->seq_lens.view();
  ia.topk_out = topk_out.view();
  expect_workspace_checked(ia, "index top-k decode");
}

// The CUDA sparse attention addresses a page with 32-bit offsets: a cache whose pages span 2^31
// elements or more (here 128 tokens x a token stride of 2^24) is declined with kNotSupported
// before any kernel runs, for K and for V. The views alias the fixture's memory and are never
// read.
TEST(CudaMisc, SparseAttentionDeclinesPagesBeyond32BitOffsets) {
  MSA_REQUIRE_TEST_DEVICE();
  std::unique_ptr<attn::Batch> d = attn::make_batch(small_decode_spec(), test_device());
  const SparseAttentionDecodeArgs good = attn::decode_args(*d);
  const int64_t bs = good.kv_cache.block_size(), dim = good.kv_cache.head_dim();
  const int64_t stride = int64_t{1} << 24;
  auto huge = [&](const TensorView& side) {
    return make_strided_tensor(side.data, side.dtype, {side.shape[0], side.shape[1], bs, dim},
                               {bs * stride, bs * stride, stride, 1}, side.device);
  };
  for (int which = 0; which < 2; ++which) {
    SparseAttentionDecodeArgs a = good;
    a.kv_cache.scale_mode = KvScaleMode::kNone;
    (which == 0 ? a.kv_cache.k : a.kv_cache.v) =
        huge(which == 0 ? good.kv_cache.k : good.kv_cache.v);
    ASSERT_TRUE(check(a).ok()) << check(a).to_string();
    const Status st = attn::run_op(a, test_device());
    expect_code(st, StatusCode::kNotSupported, which == 0 ? "K pages of 2^31 elements" : "V pages");
    EXPECT_NE(st.message().find("token stride"), std::string::npos) << st.to_string();
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The same bound in the CUDA indexer: index-cache pages of 2^31 elements or more are declined.
TEST(CudaMisc, IndexTopkDeclinesPagesBeyond32BitOffsets) {
  MSA_REQUIRE_TEST_DEVICE();
  std::unique_ptr<attn::Batch> d = attn::make_batch(small_decode_spec(), test_device());
  TestTensor index_q(DType::kBF16, {3, 1, 128}, test_device());
  TestTensor index_cache(DType::kBF16, {8, 128, 128}, test_device());
  TestTensor topk_out(DType::kI32, {1, 3, 16}, test_device());
  const int64_t stride = int64_t{1} << 24;
  IndexTopkDecodeArgs ia;
  ia.index_q = index_q.view();
  ia.index_cache = make_strided_tensor(index_cache.view().data, DType::kBF16, {8, 128, 128},
                                       {128 * stride, stride, 1}, test_device());
  ia.block_table = d->block_table.view();
  ia.seq_lens = d->seq_lens.view();
  ia.topk_out = topk_out.view();
  ASSERT_TRUE(check(ia).ok()) << check(ia).to_string();
  const Status st = attn::run_op(ia, test_device());
  expect_code(st, StatusCode::kNotSupported, "index-cache pages of 2^31 elements");
  EXPECT_NE(st.message().find("key stride"), std::string::npos) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The CUDA fused op runs one grid column per token: a batch of 2^31 tokens is declined with
// kNotSupported before any kernel runs. The views repeat one small row (stride 0) and are never
// read.
TEST(CudaMisc, FusedDeclinesTokensBeyondTheGrid) {
  MSA_REQUIRE_TEST_DEVICE();
  const Device dev = test_device();
  const int64_t tokens = int64_t{1} << 31, nq = 2, d = 128;
  TestTensor qkv(DType::kBF16, {1, (nq + 2) * d}, dev);
  TestTensor positions(DType::kI32, {1}, dev);
  TestTensor cos_sin(DType::kF32, {64, 64}, dev);
  TestTensor w(DType::kBF16, {d}, dev);
  FusedQkNormRopeArgs a;
  a.mode = PreAttentionMode::kDense;
  a.num_q_heads = static_cast<int>(nq);
  a.num_kv_heads = 1;
  a.qkv = make_strided_tensor(qkv.view().data, DType::kBF16, {tokens, (nq + 2) * d}, {0, 1}, dev);
  a.positions = make_strided_tensor(positions.view().data, DType::kI32, {tokens}, {0}, dev);
  a.cos_sin_cache = cos_sin.view();
  a.q_norm_weight = w.view();
  a.k_norm_weight = w.view();
  ASSERT_TRUE(check(a).ok()) << check(a).to_string();
  const Status st = attn::run_op(a, dev);
  expect_code(st, StatusCode::kNotSupported, "2^31 tokens");
  EXPECT_NE(st.message().find("tokens"), std::string::npos) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Dense-mode fused op with a K/V insert: token 1's slot is beyond the cache, token 2's is
// negative. Token 1 is flagged and inserts nothing, token 2 inserts nothing silently, tokens 0
// and 3 are inserted, and every token's k is still normed and roped in place.
TEST(CudaMisc, FusedBadSlotIsSkippedAndFlagged) {
  MSA_REQUIRE_TEST_DEVICE();
  const Device dev = test_device();
  const int64_t tokens = 4, nq = 2, d = 128, nb = 2, bs = 128;
  std::mt19937_64 rng(3);
  TestTensor qkv(DType::kBF16, {tokens, (nq + 2) * d}, dev);
  qkv.fill_uniform(rng, -2.0, 2.0);
  const std::vector<uint8_t> qkv_in = qkv.host_bytes();
  TestTensor positions(DType::kI32, {tokens}, dev), slots(DType::kI64, {tokens}, dev);
  const int64_t slot_values[4] = {5, nb * bs, -1, 130};
  for (int64_t t = 0; t < tokens; ++t) {
    positions.set_flat(t, static_cast<double>(10 + t));
    slots.set_flat(t, static_cast<double>(slot_values[t]));
  }
  TestTensor cos_sin(DType::kF32, {64, 64}, dev);
  cos_sin.fill_uniform(rng, -1.0, 1.0);
  TestTensor w(DType::kBF16, {d}, dev);
  w.fill_uniform(rng, -0.5, 0.5);
  TestTensor cache(DType::kBF16, {nb, 1, bs, 2 * d}, dev);
  cache.fill_bytes(0x11);
  const std::vector<uint8_t> cache_in = cache.host_bytes();
  TestTensor flags(DType::kI32, {1}, dev);
  for (TestTensor* t : {&qkv, &positions, &slots, &cos_sin, &w, &cache, &flags}) t->upload();

  FusedQkNormRopeArgs a;
  a.mode = PreAttentionMode::kDense;
  a.num_q_heads = static_cast<int>(nq);
  a.num_kv_heads = 1;
  a.qkv = qkv.view();
  a.positions = positions.view();
  a.cos_sin_cache = cos_sin.view();
  a.q_norm_weight = w.view();
  a.k_norm_weight = w.view();
  a.slot_mapping = slots.view();
  ASSERT_TRUE(make_packed_kv_cache(cache.view(), &a.kv_cache).ok());
  a.error_flags = flags.view();
  const Status st = attn::run_op(a, dev);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (TestTensor* t : {&qkv, &cache, &flags}) t->download();
  EXPECT_EQ(static_cast<int32_t>(flags.get_flat(0)), kDeviceErrorSlot);

  // Expected cache: the input pattern with the K and V rows of tokens 0 and 3 replaced by the
  // op's k (as left in qkv: same dtype, same single rounding) and the unchanged v.
  std::vector<uint8_t> want = cache_in;
  const size_t row_bytes = static_cast<size_t>(d) * 2;
  for (int64_t t : {0, 3}) {
    const int64_t slot = slot_values[t];
    const size_t cache_row = static_cast<size_t>(((slot / bs) * bs + slot % bs) * 2 * d) * 2;
    const size_t qkv_row = static_cast<size_t>(t * (nq + 2) * d) * 2;
    std::memcpy(&want[cache_row], &qkv.host_bytes()[qkv_row + nq * row_bytes], row_bytes);
    std::memcpy(&want[cache_row + row_bytes], &qkv_in[qkv_row + (nq + 1) * row_bytes], row_bytes);
  }
  EXPECT_TRUE(cache.host_bytes() == want) << "cache differs from the expected inserts";

  // k of every token was rewritten in place (the bad slot skips only the insert); v is intact.
  for (int64_t t = 0; t < tokens; ++t) {
    const size_t k_off = static_cast<size_t>(t * (nq + 2) * d + nq * d) * 2;
    const size_t v_off = k_off + row_bytes;
    EXPECT_NE(std::memcmp(&qkv.host_bytes()[k_off], &qkv_in[k_off], row_bytes), 0)
        << "k of token " << t << " not rewritten";
    EXPECT_EQ(std::memcmp(&qkv.host_bytes()[v_off], &qkv_in[v_off], row_bytes), 0)
        << "v of token " << t << " modified";
  }
}

}  // namespace
}  // namespace test
}  // namespace msa
