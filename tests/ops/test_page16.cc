// Page-16 sparse block table (spec A10, B3.4) on the binary's test device: the table and the
// context lengths against the header formula, the composition property (plain paged attention
// over the first context_len tokens of each virtual sequence equals sparse attention, both in
// the float64 oracle), thread-count invariance, and bad inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "msa/indexer.h"
#include "ops/attention_cases.h"

namespace msa {
namespace test {
namespace {

using attn::Batch;
using attn::BatchSpec;

struct Page16Buffers {
  TestTensor table, context_lens;
};

Page16Buffers make_buffers(const Batch& b) {
  const int64_t rows = b.rows * b.spec.num_kv_heads;
  return {TestTensor(DType::kI32, {rows, b.spec.topk_width * b.spec.block_size / 16}, b.device),
          TestTensor(DType::kI32, {rows}, b.device)};
}

SparsePage16Args page16_args(const Batch& b, const Page16Buffers& out, int page_stride) {
  SparsePage16Args a;
  a.query_len = b.spec.query_len;
  a.page_stride = page_stride;
  a.block_size = static_cast<int>(b.spec.block_size);
  a.topk = b.topk.view();
  a.block_table = b.block_table.view();
  a.seq_lens = b.seq_lens.view();
  a.table_out = out.table.view();
  a.context_lens_out = out.context_lens.view();
  a.error_flags = b.flags.view();
  return a;
}

// Poisons the outputs (-1 is never a valid entry), runs and downloads.
Status run_page16(Page16Buffers& out, const SparsePage16Args& a, const Device& device,
                  Stream stream = Stream{}) {
  out.table.poison_device();
  out.context_lens.poison_device();
  const Status st = attn::run_op(a, device, stream);
  out.table.download();
  out.context_lens.download();
  return st;
}

// The expected table straight from the header comment of SparsePage16Args.
struct Expected {
  std::vector<int32_t> table, context_lens;
  int64_t rows_own_selected = 0, rows_own_not_selected = 0;
};

Expected expected_table(const Batch& b, int64_t page_stride) {
  const int64_t hkv = b.spec.num_kv_heads, bs = b.spec.block_size, k = b.spec.topk_width;
  const int64_t ppb = bs / 16, width = k * ppb;
  Expected e;
  e.table.assign(static_cast<size_t>(b.rows * hkv * width), 0);
  e.context_lens.assign(static_cast<size_t>(b.rows * hkv), 0);
  for (int64_t t = 0; t < b.rows; ++t) {
    const int64_t p = b.row_pos[t];
    if (p < 0) continue;
    const int64_t req = b.row_request[t], own = p / bs;
    for (int64_t h = 0; h < hkv; ++h) {
      const int64_t row = t * hkv + h;
      std::set<int64_t> ids;
      for (int64_t i = 0; i < k; ++i) {
        const int32_t id = b.topk_host[(h * b.topk_rows() + t) * k + i];
        if (id >= 0) ids.insert(id);
      }
      int64_t col = 0, n_full = 0;
      for (int64_t id : ids) {
        const int64_t page = b.block_table_host[req * b.max_blocks + id];
        for (int64_t j = 0; j < ppb; ++j) {
          e.table[row * width + col++] = static_cast<int32_t>((page * page_stride + j) * hkv + h);
        }
        if (id < own) ++n_full;
      }
      const int64_t n_valid = static_cast<int64_t>(ids.size());
      if (ids.count(own)) {
        e.context_lens[row] = static_cast<int32_t>(n_full * bs + (p + 1 - bs * own));
        ++e.rows_own_selected;
      } else {
        e.context_lens[row] = static_cast<int32_t>(std::min(n_valid * bs, p + 1));
        ++e.rows_own_not_selected;
      }
    }
  }
  return e;
}

struct Config {
  int64_t num_kv_heads, block_size;
  int page_stride;
  int query_len;
  bool own_block;
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << "Hkv " << c.num_kv_heads << ", block " << c.block_size << ", stride " << c.page_stride
      << ", query_len " << c.query_len << (c.own_block ? ", own block" : ", no own block");
}

class Page16Cases : public ::testing::TestWithParam<Config> {};

BatchSpec spec_for(const Config& c) {
  BatchSpec s;
  s.num_kv_heads = c.num_kv_heads;
  s.num_q_heads = 2 * c.num_kv_heads;
  s.head_dim = 64;
  s.block_size = c.block_size;
  s.query_len = c.query_len;
  s.seq_lens = {c.query_len, 5 * c.block_size + 3, 0, 2 * c.block_size, 9 * c.block_size - 1};
  s.topk_width = 4;
  s.topk_extra_rows = 2;
  s.own_block = c.own_block;
  s.seed = static_cast<uint64_t>(c.num_kv_heads * 1000 + c.block_size + c.page_stride +
                                 c.query_len * 7 + (c.own_block ? 1 : 0));
  return s;
}

// The table and context lengths equal the header formula; every element is written.
TEST_P(Page16Cases, TableMatchesFormula) {
  MSA_REQUIRE_TEST_DEVICE();
  const Config c = GetParam();
  std::unique_ptr<Batch> b = attn::make_batch(spec_for(c), test_device());
  Page16Buffers out = make_buffers(*b);
  const Status st = run_page16(out, page16_args(*b, out, c.page_stride), b->device);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const Expected e = expected_table(*b, c.page_stride);
  EXPECT_GT(c.own_block ? e.rows_own_selected : e.rows_own_not_selected, 0);
  for (size_t i = 0; i < e.table.size(); ++i) {
    ASSERT_EQ(out.table.get_flat(static_cast<int64_t>(i)), e.table[i]) << "table flat " << i;
  }
  for (size_t i = 0; i < e.context_lens.size(); ++i) {
    ASSERT_EQ(out.context_lens.get_flat(static_cast<int64_t>(i)), e.context_lens[i])
        << "context_lens " << i;
  }
  b->flags.download();
  EXPECT_EQ(b->flags.get_flat(0), 0);
}

// Property (spec A10): attending the first context_len tokens of each virtual sequence through
// the op's page-16 ids equals the sparse attention of the row. Both sides are float64 oracle
// sums over the same keys in a different order: equal to ~1e-13, checked at 1e-10.
TEST_P(Page16Cases, CompositionEqualsSparseAttention) {
  MSA_REQUIRE_TEST_DEVICE();
  const Config c = GetParam();
  std::unique_ptr<Batch> b = attn::make_batch(spec_for(c), test_device());
  Page16Buffers out = make_buffers(*b);
  ASSERT_TRUE(run_page16(out, page16_args(*b, out, c.page_stride), b->device).ok());
  std::vector<int32_t> table(static_cast<size_t>(out.table.numel()));
  for (int64_t i = 0; i < out.table.numel(); ++i) {
    table[i] = static_cast<int32_t>(out.table.get_flat(i));
  }
  std::vector<int32_t> ctx(static_cast<size_t>(out.context_lens.numel()));
  for (int64_t i = 0; i < out.context_lens.numel(); ++i) {
    ctx[i] = static_cast<int32_t>(out.context_lens.get_flat(i));
  }
  // With page stride 16 the cache has 8 K pages and 8 V pages per block in the AITER layout;
  // the oracle reads K and V through the same page-16 id, as both views share the numbering.
  const oracle::KvValues kv = b->cache->values();
  const std::vector<double> q = attn::q_values(*b);
  const double scale = attn::resolved_scale(b->spec);
  const oracle::AttentionResult via16 = oracle::page16_attention(
      q, b->spec.num_q_heads, scale, table, out.table.shape()[1], ctx, c.page_stride, kv);
  const oracle::AttentionResult sparse = oracle::attention(attn::oracle_batch(*b), q, kv);
  ASSERT_EQ(via16.out.size(), sparse.out.size());
  for (size_t i = 0; i < sparse.out.size(); ++i) {
    ASSERT_NEAR(via16.out[i], sparse.out[i], 1e-10) << "out flat " << i;
  }
  for (size_t i = 0; i < sparse.lse.size(); ++i) {
    if (std::isinf(sparse.lse[i])) {
      ASSERT_TRUE(std::isinf(via16.lse[i])) << "lse " << i;
    } else {
      ASSERT_NEAR(via16.lse[i], sparse.lse[i], 1e-10) << "lse " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Page16, Page16Cases,
                         ::testing::Values(Config{1, 128, 8, 1, true}, Config{1, 128, 16, 4, true},
                                           Config{1, 128, 8, 1, false}, Config{2, 128, 8, 2, true},
                                           Config{2, 128, 16, 1, false}, Config{4, 64, 8, 1, true},
                                           Config{2, 64, 16, 3, true}),
                         [](const ::testing::TestParamInfo<Config>& i) {
                           const Config& c = i.param;
                           return "Hkv" + std::to_string(c.num_kv_heads) + "Bs" +
                                  std::to_string(c.block_size) + "Stride" +
                                  std::to_string(c.page_stride) + "Ql" +
                                  std::to_string(c.query_len) + (c.own_block ? "Own" : "NoOwn");
                         });

TEST(Page16, DeterministicAcrossThreadCounts) {
  MSA_REQUIRE_TEST_DEVICE();
  std::unique_ptr<Batch> b = attn::make_batch(spec_for({2, 128, 8, 4, true}), test_device());
  Page16Buffers ref = make_buffers(*b);
  ASSERT_TRUE(run_page16(ref, page16_args(*b, ref, 8), b->device, Stream{nullptr, 1}).ok());
  for (int threads : {2, 8}) {
    Page16Buffers out = make_buffers(*b);
    ASSERT_TRUE(run_page16(out, page16_args(*b, out, 8), b->device, Stream{nullptr, threads}).ok());
    EXPECT_TRUE(attn::same_bytes(ref.table, out.table)) << threads << " threads";
    EXPECT_TRUE(attn::same_bytes(ref.context_lens, out.context_lens)) << threads << " threads";
  }
}

// Runs `a` over outputs holding a known pattern; checks the status and, when the op must
// write nothing, the pattern.
void expect_rejected(Page16Buffers& out, const SparsePage16Args& a, const Device& device,
                     StatusCode code, const std::string& what) {
  out.table.fill_bytes(0x3C);
  out.table.upload();
  out.context_lens.fill_bytes(0x3C);
  out.context_lens.upload();
  const Status st = attn::run_op(a, device);
  EXPECT_EQ(st.code(), code) << what << ": " << st.to_string();
  out.table.download();
  out.context_lens.download();
  bool unchanged = true;
  for (uint8_t x : out.table.host_bytes()) unchanged = unchanged && x == 0x3C;
  for (uint8_t x : out.context_lens.host_bytes()) unchanged = unchanged && x == 0x3C;
  EXPECT_TRUE(unchanged) << what << ": outputs were written";
}

TEST(Page16, RejectsBadArguments) {
  MSA_REQUIRE_TEST_DEVICE();
  std::unique_ptr<Batch> b = attn::make_batch(spec_for({2, 128, 8, 2, true}), test_device());
  Page16Buffers out = make_buffers(*b);
  const Device dev = b->device;
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  TestTensor narrow = TestTensor(DType::kI32, {b->rows * 2, 31}, dev);
  TestTensor ctx_short = TestTensor(DType::kI32, {b->rows * 2 - 1}, dev);
  TestTensor topk_short = TestTensor(DType::kI32, {2, b->rows - 1, 4}, dev);
  auto args = [&]() { return page16_args(*b, out, 8); };
  SparsePage16Args a = args();
  a.block_size = 100;
  expect_rejected(out, a, dev, kInvalid, "block_size not a multiple of 16");
  a = args();
  a.page_stride = 12;
  expect_rejected(out, a, dev, kInvalid, "page_stride 12");
  a = args();
  a.block_size = 256;
  expect_rejected(out, a, dev, kInvalid, "page_stride below block_size / 16");
  a = args();
  a.query_len = 0;
  expect_rejected(out, a, dev, kInvalid, "query_len 0");
  a = args();
  a.table_out = narrow.view();
  expect_rejected(out, a, dev, kInvalid, "table_out width");
  a = args();
  a.context_lens_out = ctx_short.view();
  expect_rejected(out, a, dev, kInvalid, "context_lens_out shape");
  a = args();
  a.topk = topk_short.view();
  expect_rejected(out, a, dev, kInvalid, "topk rows");
  a = args();
  a.topk.dtype = DType::kI64;
  expect_rejected(out, a, dev, kInvalid, "topk dtype");
  a = args();
  a.seq_lens = ctx_short.view();
  expect_rejected(out, a, dev, kInvalid, "seq_lens shape");
}

TEST(Page16, RejectsBadValues) {
  MSA_REQUIRE_TEST_DEVICE();
  struct Case {
    const char* what;
    int32_t bit;
  };
  for (const Case& c : {Case{"topk id beyond visible", kDeviceErrorTopkId},
                        Case{"negative page", kDeviceErrorBlockId},
                        Case{"seq_len beyond table", kDeviceErrorSeqLen}}) {
    std::unique_ptr<Batch> b = attn::make_batch(spec_for({1, 128, 8, 1, true}), test_device());
    // Request 1 holds 5 * 128 + 3 tokens: row 1 sees blocks 0..5.
    if (c.bit == kDeviceErrorTopkId) attn::set_topk_row(*b, 0, 1, {0, 6});
    if (c.bit == kDeviceErrorBlockId) {
      attn::set_topk_row(*b, 0, 1, {2, 5});
      b->block_table.set({1, 2}, -4);
      b->block_table.upload();
    }
    if (c.bit == kDeviceErrorSeqLen) {
      b->seq_lens.set_flat(1, static_cast<double>(b->max_blocks * 128 + 1));
      b->seq_lens.upload();
    }
    Page16Buffers out = make_buffers(*b);
    b->flags.set_flat(0, 0);
    b->flags.upload();
    if (b->device.is_cpu()) {
      expect_rejected(out, page16_args(*b, out, 8), b->device, StatusCode::kOutOfRange, c.what);
    } else {
      EXPECT_TRUE(attn::run_op(page16_args(*b, out, 8), b->device).ok()) << c.what;
    }
    b->flags.download();
    EXPECT_EQ(static_cast<int32_t>(b->flags.get_flat(0)), c.bit) << c.what;
  }
}

}  // namespace
}  // namespace test
}  // namespace msa
