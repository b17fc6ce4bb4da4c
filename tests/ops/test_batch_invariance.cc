// Batch invariance (`batch_invariant = true`): a request's outputs are bitwise the same alone and
// inside random batches of other requests, for every attention form and the index top-k, on the
// binary's test device. Each request is re-run alone through slices of the batch's own tensors,
// so the inputs are the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/test_tensor.h"
#include "msa/attention.h"
#include "msa/indexer.h"
#include "ops/attention_cases.h"

namespace msa {
namespace test {
namespace {

using attn::BatchSpec;
using attn::Form;

// Random request lengths: decode contexts 1..3000 (some padded), prefill chunks of 1..300 rows
// after prefixes of 0..1500.
BatchSpec random_spec(Form form, uint64_t seed) {
  std::mt19937_64 rng(seed);
  BatchSpec s;
  s.form = form;
  s.seed = seed;
  s.nan_past_len = true;
  s.out_dtype = seed % 2 ? DType::kBF16 : DType::kF32;
  const int n = 3 + static_cast<int>(rng() % 4);
  if (form == Form::kDecode) {
    s.query_len = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) {
      const int64_t len = rng() % 5 == 0 ? 0 : static_cast<int64_t>(s.query_len + rng() % 3000);
      s.seq_lens.push_back(len);
    }
  } else {
    for (int i = 0; i < n; ++i) {
      const int64_t q = 1 + static_cast<int64_t>(rng() % 300);
      s.query_lens.push_back(q);
      s.seq_lens.push_back(q + static_cast<int64_t>(rng() % 1500));
    }
    s.padding_rows = static_cast<int64_t>(rng() % 3);
  }
  return s;
}

// Rows [first, first + count) of a downloaded tensor's host bytes (contiguous, rows outermost).
std::vector<uint8_t> row_bytes(const TestTensor& t, int64_t first, int64_t count) {
  const std::vector<uint8_t>& all = t.host_bytes();
  const size_t per_row = all.size() / static_cast<size_t>(t.shape()[0]);
  return std::vector<uint8_t>(all.begin() + static_cast<int64_t>(per_row) * first,
                              all.begin() + static_cast<int64_t>(per_row) * (first + count));
}

void check_attention(Form form, uint64_t seed) {
  const BatchSpec s = random_spec(form, seed);
  std::unique_ptr<attn::Batch> b = attn::make_batch(s, test_device());
  b->out.poison_device();
  b->lse.poison_device();
  Status st;
  if (form == Form::kDecode) {
    SparseAttentionDecodeArgs a = attn::decode_args(*b);
    a.batch_invariant = true;
    st = attn::run_op(a, b->device);
  } else if (form == Form::kPrefill) {
    SparseAttentionPrefillArgs a = attn::prefill_args(*b);
    a.batch_invariant = true;
    st = attn::run_op(a, b->device);
  } else {
    DenseAttentionArgs a = attn::dense_args(*b);
    a.batch_invariant = true;
    st = attn::run_op(a, b->device);
  }
  ASSERT_TRUE(st.ok()) << st.to_string();
  b->out.download();
  b->lse.download();
  const int64_t hq = s.num_q_heads, d = s.head_dim;
  for (size_t r = 0; r < s.seq_lens.size(); ++r) {
    const int64_t ri = static_cast<int64_t>(r);
    const int64_t row0 = form == Form::kDecode ? ri * s.query_len : b->cu[r];
    const int64_t rows = form == Form::kDecode ? s.query_len : s.query_lens[r];
    if (rows == 0) continue;
    TestTensor cu(DType::kI32, {2}, test_device());
    cu.set_flat(0, 0);
    cu.set_flat(1, static_cast<double>(rows));
    cu.upload();
    TestTensor out(s.out_dtype, {rows, hq, d}, test_device());
    TestTensor lse(DType::kF32, {rows, hq}, test_device());
    out.poison_device();
    lse.poison_device();
    if (form == Form::kDecode) {
      SparseAttentionDecodeArgs a = attn::decode_args(*b);
      a.batch_invariant = true;
      a.q = a.q.slice(0, row0, rows);
      a.block_table = a.block_table.slice(0, ri, 1);
      a.seq_lens = a.seq_lens.slice(0, ri, 1);
      a.topk = a.topk.slice(1, row0, rows);
      a.out = out.view();
      a.lse = lse.view();
      st = attn::run_op(a, test_device());
    } else if (form == Form::kPrefill) {
      SparseAttentionPrefillArgs a = attn::prefill_args(*b);
      a.batch_invariant = true;
      a.q = a.q.slice(0, row0, rows);
      a.block_table = a.block_table.slice(0, ri, 1);
      a.seq_lens = a.seq_lens.slice(0, ri, 1);
      a.topk = a.topk.slice(1, row0, rows);
      a.cu_seqlens_q = cu.view();
      a.out = out.view();
      a.lse = lse.view();
      st = attn::run_op(a, test_device());
    } else {
      DenseAttentionArgs a = attn::dense_args(*b);
      a.batch_invariant = true;
      a.q = a.q.slice(0, row0, rows);
      a.block_table = a.block_table.slice(0, ri, 1);
      a.seq_lens = a.seq_lens.slice(0, ri, 1);
      a.cu_seqlens_q = cu.view();
      a.out = out.view();
      a.lse = lse.view();
      st = attn::run_op(a, test_device());
    }
    ASSERT_TRUE(st.ok()) << st.to_string();
    out.download();
    lse.download();
    EXPECT_TRUE(out.host_bytes() == row_bytes(b->out, row0, rows))
        << "seed " << seed << ", request " << r << ": out differs alone and in the batch";
    EXPECT_TRUE(lse.host_bytes() == row_bytes(b->lse, row0, rows))
        << "seed " << seed << ", request " << r << ": lse differs alone and in the batch";
  }
}

class BatchInvariance : public ::testing::TestWithParam<uint64_t> {};

TEST_P(BatchInvariance, SparseAttentionDecode) {
  MSA_REQUIRE_TEST_DEVICE();
  check_attention(Form::kDecode, GetParam());
}

TEST_P(BatchInvariance, SparseAttentionPrefill) {
  MSA_REQUIRE_TEST_DEVICE();
  check_attention(Form::kPrefill, GetParam());
}

TEST_P(BatchInvariance, DenseAttention) {
  MSA_REQUIRE_TEST_DEVICE();
  check_attention(Form::kDense, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Random, BatchInvariance, ::testing::Values(1, 2, 3, 4));

// Index top-k: random queries and keys (head dim 128) of `dtype`, every request scored alone and
// in the batch; the top-k rows must be equal. bf16 with one index head; e4m3 with 32 and a
// 300-row first request, which alone takes the CUDA scorer's per-call key copy (num_requests *
// 8192 <= H * T) while the batch of it and three short requests converts per tile.
void check_index(bool prefill, uint64_t seed, DType dtype = DType::kBF16) {
  std::mt19937_64 rng(seed);
  const bool e4m3 = dtype == DType::kE4M3;
  const int64_t n = 4, bs = 128, di = 128, heads = e4m3 ? 32 : 1;
  std::vector<int64_t> lens, qlens;
  for (int64_t i = 0; i < n; ++i) {
    int64_t q = prefill ? 1 + static_cast<int64_t>(rng() % (e4m3 ? 100 : 300)) : 1;
    if (prefill && e4m3 && i == 0) q = 300;
    qlens.push_back(q);
    lens.push_back(q + static_cast<int64_t>(rng() % 3000));
  }
  int64_t rows = 0, blocks = 0, max_blocks = 0;
  std::vector<int64_t> cu{0};
  for (int64_t i = 0; i < n; ++i) {
    rows += qlens[static_cast<size_t>(i)];
    cu.push_back(rows);
    const int64_t nb = (lens[static_cast<size_t>(i)] + bs - 1) / bs;
    blocks += nb;
    max_blocks = std::max(max_blocks, nb);
  }
  const Device dev = test_device();
  TestTensor q(dtype, {rows, heads, di}, dev), cache(dtype, {blocks, bs, di}, dev);
  TestTensor table(DType::kI32, {n, max_blocks}, dev), seq(DType::kI32, {n}, dev);
  TestTensor cus(DType::kI32, {n + 1}, dev), out(DType::kI32, {heads, rows, 16}, dev);
  q.fill_uniform(rng, -1.0, 1.0);
  cache.fill_uniform(rng, -1.0, 1.0);
  int64_t page = 0;
  for (int64_t i = 0; i < n; ++i) {
    seq.set_flat(i, static_cast<double>(lens[static_cast<size_t>(i)]));
    for (int64_t j = 0; j < max_blocks; ++j)
      table.set({i, j}, j < (lens[static_cast<size_t>(i)] + bs - 1) / bs ? page++ : 0);
  }
  for (int64_t i = 0; i <= n; ++i) cus.set_flat(i, static_cast<double>(cu[static_cast<size_t>(i)]));
  for (TestTensor* t : {&q, &cache, &table, &seq, &cus}) t->upload();
  auto run_rows = [&](int64_t r0, int64_t nr, int64_t req, int64_t nreq, TestTensor& dst,
                      const TensorView& cu_view) {
    dst.poison_device();
    Status st;
    if (prefill) {
      IndexTopkPrefillArgs a;
      a.batch_invariant = true;
      a.index_q = q.view().slice(0, r0, nr);
      a.index_cache = cache.view();
      a.block_table = table.view().slice(0, req, nreq);
      a.seq_lens = seq.view().slice(0, req, nreq);
      a.cu_seqlens_q = cu_view;
      a.topk_out = dst.view();
      st = attn::run_op(a, dev);
    } else {
      IndexTopkDecodeArgs a;
      a.batch_invariant = true;
      a.index_q = q.view().slice(0, r0, nr);
      a.index_cache = cache.view();
      a.block_table = table.view().slice(0, req, nreq);
      a.seq_lens = seq.view().slice(0, req, nreq);
      a.topk_out = dst.view();
      st = attn::run_op(a, dev);
    }
    ASSERT_TRUE(st.ok()) << st.to_string();
    dst.download();
  };
  run_rows(0, rows, 0, n, out, cus.view());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r0 = cu[static_cast<size_t>(i)], nr = qlens[static_cast<size_t>(i)];
    TestTensor one(DType::kI32, {heads, nr, 16}, dev), one_cu(DType::kI32, {2}, dev);
    one_cu.set_flat(0, 0);
    one_cu.set_flat(1, static_cast<double>(nr));
    one_cu.upload();
    run_rows(r0, nr, i, 1, one, one_cu.view());
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < nr; ++t) {
        for (int64_t c = 0; c < 16; ++c) {
          ASSERT_EQ(one.get({h, t, c}), out.get({h, r0 + t, c}))
              << "seed " << seed << ", request " << i << ", head " << h << ", row " << t
              << ", column " << c;
        }
      }
    }
  }
}

TEST_P(BatchInvariance, IndexTopkDecode) {
  MSA_REQUIRE_TEST_DEVICE();
  check_index(false, GetParam());
}

TEST_P(BatchInvariance, IndexTopkPrefill) {
  MSA_REQUIRE_TEST_DEVICE();
  check_index(true, GetParam());
}

TEST_P(BatchInvariance, IndexTopkPrefillE4m3) {
  MSA_REQUIRE_TEST_DEVICE();
  check_index(true, GetParam(), DType::kE4M3);
}

}  // namespace
}  // namespace test
}  // namespace msa
