// Regression tests for what the fuzz harness (tests/fuzz) found in the CPU backend, each as the
// smallest call that shows it. Tensors are std::vectors of exactly their elements, so the
// sanitizer build reports any read past them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "msa/attention.h"

namespace msa {
namespace {

// A sparse prefill or dense attention call with no requests (cu_seqlens_q has one entry) over
// T = 4 rows.
struct NoRequests {
  std::vector<uint16_t> q = std::vector<uint16_t>(4 * 2 * 16, 0);
  std::vector<uint16_t> k = std::vector<uint16_t>(2 * 1 * 16 * 16, 0);
  std::vector<uint16_t> v = k;
  // Views of no elements still need storage (a null pointer means "not given").
  std::vector<int32_t> block_table = {-9};  // [0, 1]
  std::vector<int32_t> seq_lens = {-9};     // [0]
  std::vector<int32_t> cu_seqlens = {0};
  std::vector<int32_t> topk = std::vector<int32_t>(4 * 2, -1);
  std::vector<float> out = std::vector<float>(4 * 2 * 16, 7.0f);
  std::vector<float> workspace = std::vector<float>(1 << 20);

  template <typename Args>
  Args args() {
    Args a;
    a.q = make_tensor(q.data(), DType::kBF16, {4, 2, 16});
    a.kv_cache.k = make_tensor(k.data(), DType::kBF16, {2, 1, 16, 16});
    a.kv_cache.v = make_tensor(v.data(), DType::kBF16, {2, 1, 16, 16});
    a.block_table = make_tensor(block_table.data(), DType::kI32, {0, 1});
    a.seq_lens = make_tensor(seq_lens.data(), DType::kI32, {0});
    a.cu_seqlens_q = make_tensor(cu_seqlens.data(), DType::kI32, {1});
    a.out = make_tensor(out.data(), DType::kF32, {4, 2, 16});
    return a;
  }
  Status run_args(const SparseAttentionPrefillArgs& a) {
    SparseAttentionPrefillArgs s = a;
    s.topk = make_tensor(topk.data(), DType::kI32, {1, 4, 2});
    return run(s, Workspace{workspace.data(), workspace.size() * sizeof(float)}, Stream{});
  }
  Status run_args(const DenseAttentionArgs& a) {
    return run(a, Workspace{workspace.data(), workspace.size() * sizeof(float)}, Stream{});
  }
};

// Found as an AddressSanitizer use-after-poison in row_info: with no requests, cu_seqlens_q[0]
// was never validated, and a value above a row's index sent the row's lookup to
// cu_seqlens_q[1] and seq_lens[0], past both tensors.
template <typename Args>
void expect_first_cu_seqlen_checked() {
  NoRequests t;
  t.cu_seqlens[0] = 3;
  const Status s = t.run_args(t.args<Args>());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
  EXPECT_NE(s.message().find("cu_seqlens_q[0] = 3"), std::string::npos) << s.to_string();
  for (float x : t.out) ASSERT_EQ(x, 7.0f);
  // cu_seqlens_q = [0]: every row is padding.
  t.cu_seqlens[0] = 0;
  const Status ok = t.run_args(t.args<Args>());
  ASSERT_TRUE(ok.ok()) << ok.to_string();
  for (float x : t.out) ASSERT_EQ(x, 0.0f);
}

TEST(FuzzFindings, SparsePrefillChecksCuSeqlensWithoutRequests) {
  expect_first_cu_seqlen_checked<SparseAttentionPrefillArgs>();
}

TEST(FuzzFindings, DenseChecksCuSeqlensWithoutRequests) {
  expect_first_cu_seqlen_checked<DenseAttentionArgs>();
}

}  // namespace
}  // namespace msa
