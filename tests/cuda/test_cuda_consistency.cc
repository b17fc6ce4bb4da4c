// CUDA vs CPU backend consistency of the hot decode ops at realistic TP4 rank shapes (Hq 16,
// Hkv 1, H_idx 1, D 128, block 128, top-16) with 8K / 32K / 128K contexts: the indexer (top-k
// sets equal except among near-ties, judged in float64) and sparse attention (within the
// tensor-core tolerance of attention_cases.h), plus bitwise-identical repeated runs and fully
// written (NaN-poisoned) outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/paging.h"
#include "common/test_tensor.h"
#include "msa/indexer.h"
#include "ops/attention_cases.h"

namespace msa {
namespace test {
namespace {

// ---------------------------------------------------------------------------------------------
// Indexer.

constexpr int64_t kBlock = 128;
constexpr int64_t kIndexDim = 128;
constexpr int64_t kIndexPages = 512;  // pages are shared between blocks to keep the cache small
constexpr int kTopk = 16;
constexpr int64_t kTopkWidth = 18;  // two columns beyond topk, which must come back -1
constexpr int32_t kStale = -777;    // block-table entries past a request's used blocks

struct IndexCase {
  std::vector<int64_t> seq_lens;
  std::vector<int64_t> query_lens;  // empty: decode with `query_len` rows per request
  int query_len = 1;
  int64_t padding_rows = 0;  // prefill only
  DType dtype = DType::kBF16;
  uint64_t seed = 1;
};

struct IndexTensors {
  int64_t rows = 0, max_blocks = 0;
  std::vector<int64_t> cu, positions, requests;
  TestTensor q, cache, table, seq_lens, cu_seqlens, out, flags;
};

// Deterministic in the seed, so the CPU and CUDA copies hold identical values.
std::unique_ptr<IndexTensors> make_index(const IndexCase& c, const Device& device) {
  auto t = std::make_unique<IndexTensors>();
  const int64_t nr = static_cast<int64_t>(c.seq_lens.size());
  const bool decode = c.query_lens.empty();
  if (decode) {
    t->rows = nr * c.query_len;
    t->positions = decode_positions(c.seq_lens, c.query_len);
    for (int64_t r = 0; r < t->rows; ++r) t->requests.push_back(r / c.query_len);
  } else {
    t->cu.push_back(0);
    for (int64_t q : c.query_lens) t->cu.push_back(t->cu.back() + q);
    t->rows = t->cu.back() + c.padding_rows;
    t->positions = prefill_positions(t->cu, c.seq_lens, t->rows);
    t->requests.assign(static_cast<size_t>(t->rows), -1);
    for (int64_t b = 0; b < nr; ++b) {
      for (int64_t r = t->cu[b]; r < t->cu[b + 1]; ++r) t->requests[r] = b;
    }
  }
  for (int64_t s : c.seq_lens) t->max_blocks = std::max(t->max_blocks, ceil_div(s, kBlock) + 1);

  std::mt19937_64 rng(c.seed);
  t->q = TestTensor(c.dtype, {t->rows, 1, kIndexDim}, device);
  t->q.fill_uniform(rng, -1.0, 1.0);
  t->cache = TestTensor(c.dtype, {kIndexPages, kBlock, kIndexDim}, device);
  t->cache.fill_uniform(rng, -1.0, 1.0);
  t->table = TestTensor(DType::kI32, {nr, t->max_blocks}, device);
  std::uniform_int_distribution<int32_t> page(0, kIndexPages - 1);
  for (int64_t b = 0; b < nr; ++b) {
    for (int64_t j = 0; j < t->max_blocks; ++j) {
      t->table.set({b, j}, j < ceil_div(c.seq_lens[b], kBlock) ? page(rng) : kStale);
    }
  }
  t->seq_lens = TestTensor(DType::kI32, {nr}, device);
  for (int64_t b = 0; b < nr; ++b) t->seq_lens.set_flat(b, static_cast<double>(c.seq_lens[b]));
  t->cu_seqlens = TestTensor(DType::kI32, {nr + 1}, device);
  for (size_t i = 0; i < t->cu.size(); ++i) {
    t->cu_seqlens.set_flat(static_cast<int64_t>(i), static_cast<double>(t->cu[i]));
  }
  t->out = TestTensor(DType::kI32, {1, t->rows, kTopkWidth}, device);
  t->flags = TestTensor(DType::kI32, {1}, device);
  t->flags.set_flat(0, 0);
  for (TestTensor* x : {&t->q, &t->cache, &t->table, &t->seq_lens, &t->cu_seqlens, &t->flags}) {
    x->upload();
  }
  return t;
}

Status run_index(const IndexCase& c, IndexTensors& t) {
  IndexTopkParams params;
  params.topk = kTopk;
  t.out.poison_device();
  Status st;
  if (c.query_lens.empty()) {
    IndexTopkDecodeArgs a;
    a.params = params;
    a.query_len = c.query_len;
    a.index_q = t.q.view();
    a.index_cache = t.cache.view();
    a.block_table = t.table.view();
    a.seq_lens = t.seq_lens.view();
    a.topk_out = t.out.view();
    a.error_flags = t.flags.view();
    st = attn::run_op(a, t.q.device());
  } else {
    IndexTopkPrefillArgs a;
    a.params = params;
    a.index_q = t.q.view();
    a.index_cache = t.cache.view();
    a.block_table = t.table.view();
    a.cu_seqlens_q = t.cu_seqlens.view();
    a.seq_lens = t.seq_lens.view();
    a.topk_out = t.out.view();
    a.error_flags = t.flags.view();
    st = attn::run_op(a, t.q.device());
  }
  t.out.download();
  t.flags.download();
  return st;
}

// float64 block score of (row, block) from the host mirrors (visible keys only).
double score64(const IndexTensors& t, int64_t row, int64_t block) {
  const int64_t req = t.requests[row], pos = t.positions[row];
  const int64_t page = static_cast<int64_t>(t.table.get({req, block}));
  double best = -INFINITY;
  for (int64_t j = 0; j < kBlock && block * kBlock + j <= pos; ++j) {
    double acc = 0.0;
    for (int64_t d = 0; d < kIndexDim; ++d) {
      acc += t.q.get({row, 0, d}) * t.cache.get({page, j, d});
    }
    best = std::max(best, acc);
  }
  return best;
}

std::vector<int32_t> topk_row(const IndexTensors& t, int64_t row) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < kTopkWidth; ++i) {
    ids.push_back(static_cast<int32_t>(t.out.get({0, row, i})));
  }
  return ids;
}

// Structural checks of one CUDA row (ascending, -1 padded, right count, own block kept), then
// set equality with the CPU row up to near-ties at the k-th score.
void expect_rows_match(const IndexTensors& gpu, const IndexTensors& cpu, int64_t row,
                       int* near_tie_rows) {
  const std::vector<int32_t> g = topk_row(gpu, row), c = topk_row(cpu, row);
  const int64_t pos = gpu.positions[row];
  const int64_t nvb = (gpu.requests[row] >= 0 && pos >= 0) ? pos / kBlock + 1 : 0;
  const int64_t kept = std::min<int64_t>(kTopk, nvb);
  for (int64_t i = 0; i < kTopkWidth; ++i) {
    if (i < kept) {
      ASSERT_TRUE(g[i] >= 0 && g[i] < nvb) << "row " << row << " col " << i << " = " << g[i];
      if (i > 0) {
        ASSERT_LT(g[i - 1], g[i]) << "row " << row << ": ids not ascending";
      }
    } else {
      ASSERT_EQ(g[i], -1) << "row " << row << " col " << i << ": expected -1 padding";
    }
  }
  if (kept > 0) {
    ASSERT_EQ(g[kept - 1], nvb - 1) << "row " << row << ": own block not selected";
  }
  if (g == c) return;
  // Sets differ: every differing block must score within eps of the k-th best (float64).
  ++*near_tie_rows;
  std::vector<double> s(static_cast<size_t>(nvb));
  for (int64_t b = 0; b + 1 < nvb; ++b) s[b] = score64(gpu, row, b);
  s[nvb - 1] = INFINITY;  // the forced own block
  std::vector<double> sorted = s;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const double kth = sorted[kept - 1];
  const double eps = 1e-3 * (1.0 + std::fabs(kth));
  std::set<int32_t> gs(g.begin(), g.begin() + kept), cs(c.begin(), c.begin() + kept);
  for (int32_t id : gs) {
    if (!cs.count(id)) {
      EXPECT_LE(std::fabs(s[id] - kth), eps) << "row " << row << ": CUDA-only block " << id;
    }
  }
  for (int32_t id : cs) {
    if (id >= 0 && id < nvb && !gs.count(id)) {
      EXPECT_LE(std::fabs(s[id] - kth), eps) << "row " << row << ": CPU-only block " << id;
    }
  }
}

void check_index_case(const IndexCase& c) {
  std::unique_ptr<IndexTensors> gpu = make_index(c, test_device());
  const Status st = run_index(c, *gpu);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(gpu->flags.get_flat(0), 0);
  const std::vector<uint8_t> first = gpu->out.host_bytes();

  std::unique_ptr<IndexTensors> cpu = make_index(c, Device::cpu());
  const Status cs = run_index(c, *cpu);
  ASSERT_TRUE(cs.ok()) << cs.to_string();
  int near_tie_rows = 0;
  for (int64_t row = 0; row < gpu->rows; ++row) {
    expect_rows_match(*gpu, *cpu, row, &near_tie_rows);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Near-ties are rare with random keys; many differing rows would mean a real bug.
  EXPECT_LE(near_tie_rows, std::max<int64_t>(2, gpu->rows / 8));

  const Status again = run_index(c, *gpu);
  ASSERT_TRUE(again.ok()) << again.to_string();
  EXPECT_TRUE(gpu->out.host_bytes() == first) << "repeated run differs";
}

// Requests around `context` tokens with ragged tails; in batches of 4+ request 1 is padded.
std::vector<int64_t> ragged(int64_t context, int batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> tail(0, 255);
  std::vector<int64_t> s;
  for (int i = 0; i < batch; ++i) s.push_back(batch >= 4 && i == 1 ? 0 : context - tail(rng));
  return s;
}

IndexCase decode_case(int64_t context, int batch, int query_len, DType dtype, uint64_t seed) {
  IndexCase c;
  c.seq_lens = ragged(context, batch, seed);
  c.query_len = query_len;
  c.dtype = dtype;
  c.seed = seed;
  return c;
}

TEST(CudaConsistency, IndexTopkDecode8K) {
  MSA_REQUIRE_TEST_DEVICE();
  check_index_case(decode_case(8192, 1, 1, DType::kBF16, 11));
  check_index_case(decode_case(8192, 16, 4, DType::kE4M3, 12));
  // Batch 4 selects in-cluster on the H200 (launch_policy.h), batches 1 and 16 in the select
  // kernel.
  check_index_case(decode_case(8192, 4, 1, DType::kBF16, 13));
  check_index_case(decode_case(8192, 4, 4, DType::kE4M3, 14));
}

TEST(CudaConsistency, IndexTopkDecode32K) {
  MSA_REQUIRE_TEST_DEVICE();
  check_index_case(decode_case(32768, 4, 4, DType::kBF16, 21));
  check_index_case(decode_case(32768, 16, 1, DType::kE4M3, 22));
}

TEST(CudaConsistency, IndexTopkDecode128K) {
  MSA_REQUIRE_TEST_DEVICE();
  check_index_case(decode_case(131072, 1, 4, DType::kBF16, 31));
  check_index_case(decode_case(131072, 16, 1, DType::kBF16, 32));
  check_index_case(decode_case(131072, 4, 1, DType::kE4M3, 33));
}

TEST(CudaConsistency, IndexTopkPrefill) {
  MSA_REQUIRE_TEST_DEVICE();
  for (DType dtype : {DType::kBF16, DType::kE4M3}) {
    IndexCase c;
    c.seq_lens = {4200, 0, 3000};
    c.query_lens = {200, 0, 600};
    c.padding_rows = 5;
    c.dtype = dtype;
    c.seed = 41;
    check_index_case(c);
  }
}

// ---------------------------------------------------------------------------------------------
// Sparse attention. Pages are shared between blocks (attn::BatchSpec::shared_pages) so that the
// caches of 128K contexts stay small; the top-k lists are random ascending sets with the own
// block. The CPU backend runs on the same inputs; the tolerance is attention_cases.h's CUDA
// budget (bf16 rounding of dequantised K/V and of P for the MMAs: 8e-3 of max|v|, plus one ulp
// of the output dtype; lse 2e-3 * (1 + |lse|)).

attn::BatchSpec attention_spec(int64_t context, int batch, int query_len, DType cache,
                               uint64_t seed) {
  attn::BatchSpec s;
  s.form = attn::Form::kDecode;
  s.num_q_heads = 16;
  s.num_kv_heads = 1;
  s.head_dim = 128;
  s.block_size = kBlock;
  s.query_len = query_len;
  s.seq_lens = ragged(context, batch, seed);
  s.topk_width = kTopk;
  s.shared_pages = true;
  s.cache_dtype = cache;
  s.scale_mode = cache == DType::kE4M3 ? KvScaleMode::kPerTokenHead : KvScaleMode::kNone;
  s.q_dtype = DType::kBF16;
  s.out_dtype = seed % 2 ? DType::kBF16 : DType::kF32;
  s.seed = seed;
  return s;
}

void check_attention_case(const attn::BatchSpec& spec) {
  std::unique_ptr<attn::Batch> gpu = attn::make_batch(spec, test_device());
  const Status st = attn::run_batch(*gpu);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(gpu->flags.get_flat(0), 0);
  const std::vector<uint8_t> out1 = gpu->out.host_bytes();
  const std::vector<uint8_t> lse1 = gpu->lse.host_bytes();

  std::unique_ptr<attn::Batch> cpu = attn::make_batch(spec, Device::cpu());
  const Status cs = attn::run_batch(*cpu);
  ASSERT_TRUE(cs.ok()) << cs.to_string();
  const double max_v = attn::max_abs(gpu->cache->values().v);
  attn::expect_outputs_near(*gpu, attn::outputs_as_result(*cpu), max_v, gpu->device, "cpu backend");

  const Status again = attn::run_batch(*gpu);
  ASSERT_TRUE(again.ok()) << again.to_string();
  EXPECT_TRUE(gpu->out.host_bytes() == out1) << "repeated run: out differs";
  EXPECT_TRUE(gpu->lse.host_bytes() == lse1) << "repeated run: lse differs";
}

TEST(CudaConsistency, SparseAttentionDecode8K) {
  MSA_REQUIRE_TEST_DEVICE();
  check_attention_case(attention_spec(8192, 1, 1, DType::kBF16, 51));
  check_attention_case(attention_spec(8192, 16, 4, DType::kE4M3, 52));
}

TEST(CudaConsistency, SparseAttentionDecode32K) {
  MSA_REQUIRE_TEST_DEVICE();
  check_attention_case(attention_spec(32768, 4, 4, DType::kBF16, 61));
  check_attention_case(attention_spec(32768, 16, 1, DType::kE4M3, 62));
}

TEST(CudaConsistency, SparseAttentionDecode128K) {
  MSA_REQUIRE_TEST_DEVICE();
  check_attention_case(attention_spec(131072, 1, 4, DType::kE4M3, 71));
  check_attention_case(attention_spec(131072, 16, 1, DType::kBF16, 72));
  check_attention_case(attention_spec(131072, 16, 4, DType::kBF16, 73));
}

// e4m3 K/V take the kernel's f16 path (scales on fp32 logits, probabilities and outputs):
// per-layer scales as the benchmark's (1/16) and not a power of two, and no scale, in the
// in-cluster (batch 1), merge-kernel (batch 16) and unsplit (batch 64, 4 rows each) plans; the
// tests above cover per-token-head scales in the first two, and the last case here the third.
TEST(CudaConsistency, SparseAttentionDecodeE4m3F16Path) {
  MSA_REQUIRE_TEST_DEVICE();
  attn::BatchSpec b1 = attention_spec(8192, 1, 1, DType::kE4M3, 101);
  b1.scale_mode = KvScaleMode::kPerLayer;
  b1.layer_k_scale = b1.layer_v_scale = 1.0 / 16;
  check_attention_case(b1);
  attn::BatchSpec b16 = attention_spec(32768, 16, 4, DType::kE4M3, 102);
  b16.scale_mode = KvScaleMode::kPerLayer;
  b16.layer_k_scale = 0.37;
  b16.layer_v_scale = 0.011;
  check_attention_case(b16);
  attn::BatchSpec b64 = attention_spec(8192, 64, 4, DType::kE4M3, 103);
  b64.scale_mode = KvScaleMode::kNone;
  check_attention_case(b64);
  check_attention_case(attention_spec(8192, 64, 4, DType::kE4M3, 104));
}

// NaN in every cache slot past each request's length (K, V and per-token scales), in the
// one-block (16 bf16 rows) and unsplit (64 x 4 rows) plans; the in-cluster plan is covered by
// SparseAttention/...NanPastLength*. Short contexts keep the pools small.
TEST(CudaConsistency, SparseAttentionDecodeGarbagePastLength) {
  MSA_REQUIRE_TEST_DEVICE();
  attn::BatchSpec b16 = attention_spec(2048, 16, 1, DType::kBF16, 111);
  b16.shared_pages = false;
  b16.nan_past_len = true;
  check_attention_case(b16);
  attn::BatchSpec b64 = attention_spec(2048, 64, 4, DType::kE4M3, 112);
  b64.shared_pages = false;
  b64.nan_past_len = true;
  check_attention_case(b64);
  b64.scale_mode = KvScaleMode::kPerLayer;
  b64.seed = 113;
  check_attention_case(b64);
}

// Other TP ranks: TP8 (Hq 8: zero-padded MMA rows) and TP1 (Hq 64, Hkv 4), split layout.
TEST(CudaConsistency, SparseAttentionDecodeOtherRanks) {
  MSA_REQUIRE_TEST_DEVICE();
  attn::BatchSpec tp8 = attention_spec(8192, 4, 4, DType::kBF16, 81);
  tp8.num_q_heads = 8;
  check_attention_case(tp8);
  attn::BatchSpec tp1 = attention_spec(8192, 4, 1, DType::kE4M3, 82);
  tp1.num_q_heads = 64;
  tp1.num_kv_heads = 4;
  tp1.layout = attn::Layout::kSplitHnd;
  tp1.scale_mode = KvScaleMode::kPerLayer;
  check_attention_case(tp1);
}

// Prefill rows (enough of them that no split-K is used), with a padded tail.
TEST(CudaConsistency, SparseAttentionPrefill) {
  MSA_REQUIRE_TEST_DEVICE();
  attn::BatchSpec s = attention_spec(8192, 1, 1, DType::kBF16, 91);
  s.form = attn::Form::kPrefill;
  s.seq_lens = {6000, 2900};
  s.query_lens = {300, 700};
  s.padding_rows = 3;
  check_attention_case(s);
}

// The tensor-core prefill attention computes each row from its own top-k blocks only, so a
// request's outputs are bitwise the same alone and inside a batch (whose tiles and grid differ).
void check_prefill_batch_invariance(attn::Form form) {
  attn::BatchSpec s = attention_spec(8192, 1, 1, DType::kBF16, 93);
  s.form = form;
  s.seq_lens = {900, 1300 + 200, 400};
  s.query_lens = {300, 200, 400};
  s.padding_rows = 2;
  s.nan_past_len = true;
  s.shared_pages = false;  // NaN past each length needs pages of one request each
  std::unique_ptr<attn::Batch> b = attn::make_batch(s, test_device());
  ASSERT_TRUE(attn::run_batch(*b).ok());
  EXPECT_EQ(b->flags.get_flat(0), 0);
  const int64_t hq = s.num_q_heads, d = s.head_dim;
  for (size_t r = 0; r < s.seq_lens.size(); ++r) {
    const int64_t row0 = b->cu[r], rows = s.query_lens[r];
    TestTensor cu(DType::kI32, {2}, test_device());
    cu.set_flat(0, 0);
    cu.set_flat(1, static_cast<double>(rows));
    cu.upload();
    TestTensor out(s.out_dtype, {rows, hq, d}, test_device());
    TestTensor lse(DType::kF32, {rows, hq}, test_device());
    out.poison_device();
    lse.poison_device();
    Status st;
    if (form == attn::Form::kDense) {
      DenseAttentionArgs a = attn::dense_args(*b);
      a.q = a.q.slice(0, row0, rows);
      a.block_table = a.block_table.slice(0, static_cast<int64_t>(r), 1);
      a.seq_lens = a.seq_lens.slice(0, static_cast<int64_t>(r), 1);
      a.cu_seqlens_q = cu.view();
      a.out = out.view();
      a.lse = lse.view();
      st = attn::run_op(a, test_device());
    } else {
      SparseAttentionPrefillArgs a = attn::prefill_args(*b);
      a.q = a.q.slice(0, row0, rows);
      a.block_table = a.block_table.slice(0, static_cast<int64_t>(r), 1);
      a.seq_lens = a.seq_lens.slice(0, static_cast<int64_t>(r), 1);
      a.topk = a.topk.slice(1, row0, rows);
      a.cu_seqlens_q = cu.view();
      a.out = out.view();
      a.lse = lse.view();
      st = attn::run_op(a, test_device());
    }
    ASSERT_TRUE(st.ok()) << st.to_string();
    out.download();
    lse.download();
    const size_t row_bytes = static_cast<size_t>(hq * d * dtype_size(s.out_dtype));
    const std::vector<uint8_t>& all = b->out.host_bytes();
    const std::vector<uint8_t>& one = out.host_bytes();
    EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + row0 * row_bytes))
        << "request " << r << ": out differs alone and in the batch";
    const std::vector<uint8_t>& lse_all = b->lse.host_bytes();
    const std::vector<uint8_t>& lse_one = lse.host_bytes();
    EXPECT_TRUE(std::equal(lse_one.begin(), lse_one.end(), lse_all.begin() + row0 * hq * 4))
        << "request " << r << ": lse differs alone and in the batch";
  }
}

TEST(CudaConsistency, SparseAttentionPrefillBatchInvariant) {
  MSA_REQUIRE_TEST_DEVICE();
  check_prefill_batch_invariance(attn::Form::kPrefill);
}

TEST(CudaConsistency, DenseAttentionPrefillBatchInvariant) {
  MSA_REQUIRE_TEST_DEVICE();
  check_prefill_batch_invariance(attn::Form::kDense);
}

}  // namespace
}  // namespace test
}  // namespace msa
