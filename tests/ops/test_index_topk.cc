// Indexer top-k (decode and prefill forms) against the float64 oracle, on the binary's test
// device; on CUDA also against the CPU backend. Exact cases draw values as integer multiples
// of 1/8 in [-1, 1]: every product is a multiple of 1/64 and every dot of up to 128 terms fits
// in 14 significant bits, so fp32 scores equal the float64 ones and rankings must match
// exactly. Random cases use a near-tie rule (see kNearTieRelEps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/paging.h"
#include "common/test_tensor.h"
#include "core/validate.h"
#include "msa/indexer.h"
#include "oracle/index_topk_oracle.h"

namespace msa {
namespace test {
namespace {

// Blocks whose float64 score lies within this relative distance of the k-th selected score may
// swap in or out of the selection: fp32 sums in another order (the CUDA kernel) differ from the
// float64 sum by ~Di * 2^-24 relative to the sum of |terms|, far below this bound.
constexpr double kNearTieRelEps = 1e-3;

// Bytes written into outputs before a run: not 0xFF, because -1 (all-ones) is a valid output.
constexpr uint8_t kPoisonByte = 0x5A;
constexpr int32_t kPoisonWord = 0x5A5A5A5A;

// Block-table entries beyond a request's used blocks: out of range on purpose, so reading or
// validating them would fail the test.
constexpr int32_t kStaleEntry = -777;

class DeviceBuffer {
 public:
  DeviceBuffer(const Device& device, size_t bytes)
      : device_(device), data_(bytes ? device_alloc(device, bytes) : nullptr), bytes_(bytes) {}
  ~DeviceBuffer() {
    if (data_ != nullptr) device_free(device_, data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  Workspace workspace() const { return Workspace{data_, bytes_}; }

 private:
  Device device_;
  void* data_;
  size_t bytes_;
};

// Block scores in a chosen order instead of drawn values (bf16 operands): every query is
// (16, 1, 0, ...) and every key of a request's block b is (v / 16, v % 16, 0, ...) in integers,
// so block b scores v exactly: b (ascending), the request's block count - 1 - b (descending),
// 7 for every block (all tied, the lower ids win), or lane-skewed: 1024 + b for the blocks whose
// id is below 5 modulo 32, b % 7 for the others (a warp select lane holds ids l + 32 i, so five
// lanes hold every high score and the others many ties).
enum class ScoreOrder { kDrawn, kAscending, kDescending, kEqual, kLaneSkewed };

struct BatchSpec {
  DType q_dtype = DType::kBF16;
  DType k_dtype = DType::kBF16;
  int64_t heads = 1;
  int64_t head_dim = 64;
  int64_t block_size = 128;
  int query_len = 1;  // decode rows per request; 0 selects the prefill form
  std::vector<int64_t> seq_lens;
  std::vector<int64_t> q_lens;  // prefill: query rows of each request
  int64_t pad_rows = 0;         // prefill: rows after cu_seqlens_q[B]
  IndexTopkParams params;
  int64_t width = 16;
  int64_t spare_out_rows = 2;  // topk_out rows past T, which must stay untouched
  int64_t table_cols = 0;      // block-table columns when more than the lengths need
  int64_t key_pad = 0;         // index_cache elements after each key (key stride head_dim + pad)
  // > 0: the requests' blocks are drawn at random from this many pages, shared between requests
  // (as under prefix caching), instead of one page per block.
  int64_t page_pool = 0;
  bool exact = true;
  // Every query and key has 16 in dim 0 and 0, +-1/16 or +-1/8 elsewhere: each score is 256 plus
  // a multiple of 1/256 below 2 in magnitude, exact in fp32 in any order, while an accumulator
  // that keeps ~14 bits below its largest term (fp8 wgmma) loses the remainder. With `exact`.
  bool dominant = false;
  ScoreOrder order = ScoreOrder::kDrawn;
  uint64_t seed = 1;
};

bool is_prefill(const BatchSpec& s) { return s.query_len == 0; }

// One batch on one device, with the oracle's view of the same values.
struct Batch {
  BatchSpec spec;
  Device device;
  int64_t rows = 0;
  TestTensor index_q, index_cache, block_table, seq_lens, cu_seqlens_q, topk_out, flags;
  oracle::IndexTopkInput oracle_in;
};

void fill_dominant(TestTensor& t, std::mt19937_64& rng) {
  static constexpr double kSmall[] = {0.0, 0.0625, -0.0625, 0.125, -0.125};
  std::uniform_int_distribution<int> pick(0, 4);
  t.generate([&] { return kSmall[pick(rng)]; });
  for (int64_t i = 0; i < t.shape()[0]; ++i)
    for (int64_t j = 0; j < t.shape()[1]; ++j) t.set({i, j, 0}, 16.0);
}

void fill_values(TestTensor& t, std::mt19937_64& rng, bool exact) {
  if (!exact) {
    t.fill_uniform(rng, -1.0, 1.0);
    return;
  }
  std::uniform_int_distribution<int> eighths(-8, 8);
  t.generate([&] { return eighths(rng) / 8.0; });
}

Batch make_batch(const BatchSpec& spec, const Device& device) {
  Batch b;
  b.spec = spec;
  b.device = device;
  std::mt19937_64 rng(spec.seed);
  const int64_t num_req = static_cast<int64_t>(spec.seq_lens.size());
  const int64_t bs = spec.block_size;

  std::vector<int64_t> cu(1, 0);
  if (is_prefill(spec)) {
    for (int64_t q : spec.q_lens) cu.push_back(cu.back() + q);
    b.rows = cu.back() + spec.pad_rows;
  } else {
    b.rows = num_req * spec.query_len;
  }

  int64_t max_blocks = std::max<int64_t>(1, spec.table_cols), used_total = 0;
  for (int64_t s : spec.seq_lens) {
    max_blocks = std::max(max_blocks, ceil_div(s, bs) + 2);
    used_total += ceil_div(s, bs);
  }
  const int64_t num_blocks = (spec.page_pool > 0 ? spec.page_pool : used_total) + 3;
  std::vector<int32_t> table;
  if (spec.page_pool > 0) {
    table.assign(spec.seq_lens.size() * static_cast<size_t>(max_blocks), kStaleEntry);
    std::uniform_int_distribution<int32_t> page(0, static_cast<int32_t>(spec.page_pool - 1));
    for (size_t r = 0; r < spec.seq_lens.size(); ++r)
      for (int64_t blk = 0; blk < ceil_div(spec.seq_lens[r], bs); ++blk)
        table[r * static_cast<size_t>(max_blocks) + static_cast<size_t>(blk)] = page(rng);
  } else {
    table = shuffled_block_table(spec.seq_lens, max_blocks, num_blocks, bs, rng, kStaleEntry);
  }

  // index_q rows carry extra elements, as when index_q is a slice of a fused projection row.
  const int64_t row_stride = spec.heads * spec.head_dim + 16;
  b.index_q =
      TestTensor(spec.q_dtype, {b.rows, spec.heads, spec.head_dim}, {row_stride, spec.head_dim, 1},
                 std::max<int64_t>(b.rows, 1) * row_stride, device);
  if (spec.dominant) {
    fill_dominant(b.index_q, rng);
  } else {
    fill_values(b.index_q, rng, spec.exact);
  }
  const int64_t key_stride = spec.head_dim + spec.key_pad;
  b.index_cache =
      TestTensor(spec.k_dtype, {num_blocks, bs, spec.head_dim}, {bs * key_stride, key_stride, 1},
                 num_blocks * bs * key_stride, device);
  b.index_cache.fill_bytes(0x7F);  // padding a scorer must not read (an e4m3 NaN)
  if (spec.dominant) {
    fill_dominant(b.index_cache, rng);
  } else {
    fill_values(b.index_cache, rng, spec.exact);
  }
  if (spec.order != ScoreOrder::kDrawn) {
    b.index_q.generate([] { return 0.0; });
    for (int64_t t = 0; t < b.rows; ++t)
      for (int64_t h = 0; h < spec.heads; ++h) {
        b.index_q.set({t, h, 0}, 16.0);
        b.index_q.set({t, h, 1}, 1.0);
      }
    b.index_cache.generate([] { return 0.0; });
    for (int64_t r = 0; r < num_req; ++r) {
      const int64_t used = ceil_div(spec.seq_lens[static_cast<size_t>(r)], bs);
      for (int64_t blk = 0; blk < used; ++blk) {
        const int64_t v = spec.order == ScoreOrder::kAscending    ? blk
                          : spec.order == ScoreOrder::kDescending ? used - 1 - blk
                          : spec.order == ScoreOrder::kEqual      ? 7
                          : blk % 32 < 5                          ? 1024 + blk
                                                                  : blk % 7;
        const int64_t page = table[static_cast<size_t>(r * max_blocks + blk)];
        for (int64_t j = 0; j < bs; ++j) {
          b.index_cache.set({page, j, 0}, static_cast<double>(v / 16));
          b.index_cache.set({page, j, 1}, static_cast<double>(v % 16));
        }
      }
    }
  }
  b.block_table = TestTensor(DType::kI32, {num_req, max_blocks}, device);
  for (size_t i = 0; i < table.size(); ++i)
    b.block_table.set_flat(static_cast<int64_t>(i), table[i]);
  b.seq_lens = TestTensor(DType::kI32, {num_req}, device);
  for (int64_t i = 0; i < num_req; ++i)
    b.seq_lens.set_flat(i, static_cast<double>(spec.seq_lens[i]));
  b.cu_seqlens_q = TestTensor(DType::kI32, {num_req + 1}, device);
  if (is_prefill(spec)) {
    for (int64_t i = 0; i <= num_req; ++i) b.cu_seqlens_q.set_flat(i, static_cast<double>(cu[i]));
  }
  b.topk_out =
      TestTensor(DType::kI32, {spec.heads, b.rows + spec.spare_out_rows, spec.width}, device);
  b.flags = TestTensor(DType::kI32, {1}, device);

  oracle::IndexTopkInput& o = b.oracle_in;
  o.num_heads = spec.heads;
  o.head_dim = spec.head_dim;
  o.block_size = bs;
  o.max_blocks = max_blocks;
  o.block_table = table;
  o.topk = spec.params.topk;
  o.init_blocks = spec.params.init_blocks;
  o.local_blocks = spec.params.local_blocks;
  o.width = spec.width;
  if (is_prefill(spec)) {
    o.row_position = prefill_positions(cu, spec.seq_lens, b.rows);
    o.row_request.assign(static_cast<size_t>(b.rows), -1);
    for (int64_t r = 0; r < num_req; ++r)
      for (int64_t t = cu[r]; t < cu[r + 1]; ++t) o.row_request[t] = r;
  } else {
    o.row_position = decode_positions(spec.seq_lens, spec.query_len);
    for (int64_t t = 0; t < b.rows; ++t) o.row_request.push_back(t / spec.query_len);
  }
  o.index_q = b.index_q.values();          // row-major [rows, heads, head_dim]
  o.index_cache = b.index_cache.values();  // row-major [blocks, bs, head_dim]
  return b;
}

void upload_all(Batch& b) {
  for (TestTensor* t : {&b.index_q, &b.index_cache, &b.block_table, &b.seq_lens, &b.cu_seqlens_q}) {
    t->upload();
  }
  b.topk_out.fill_bytes(kPoisonByte);
  b.topk_out.upload();
  b.flags.set_flat(0, 0);
  b.flags.upload();
}

Status run_batch(const Batch& b, TensorView topk_out, Stream stream, bool with_flags = true,
                 TensorView index_q = TensorView()) {
  const TensorView q = index_q.defined() ? index_q : b.index_q.view();
  const TensorView flags = with_flags ? b.flags.view() : TensorView();
  size_t bytes = 0;
  if (is_prefill(b.spec)) {
    IndexTopkPrefillArgs a;
    a.params = b.spec.params;
    a.index_q = q;
    a.index_cache = b.index_cache.view();
    a.block_table = b.block_table.view();
    a.cu_seqlens_q = b.cu_seqlens_q.view();
    a.seq_lens = b.seq_lens.view();
    a.topk_out = topk_out;
    a.error_flags = flags;
    MSA_RETURN_IF_ERROR(workspace_size(a, &bytes));
    DeviceBuffer ws(b.device, bytes);
    return run(a, ws.workspace(), stream);
  }
  IndexTopkDecodeArgs a;
  a.params = b.spec.params;
  a.query_len = b.spec.query_len;
  a.index_q = q;
  a.index_cache = b.index_cache.view();
  a.block_table = b.block_table.view();
  a.seq_lens = b.seq_lens.view();
  a.topk_out = topk_out;
  a.error_flags = flags;
  MSA_RETURN_IF_ERROR(workspace_size(a, &bytes));
  DeviceBuffer ws(b.device, bytes);
  return run(a, ws.workspace(), stream);
}

// topk_out[h, t, :] of a downloaded [H, rows, width] buffer.
std::vector<int32_t> out_row(const TestTensor& out, int64_t h, int64_t t) {
  std::vector<int32_t> row;
  for (int64_t c = 0; c < out.shape()[2]; ++c)
    row.push_back(static_cast<int32_t>(out.get({h, t, c})));
  return row;
}

std::string row_string(const std::vector<int32_t>& row) {
  std::ostringstream os;
  for (int32_t v : row) os << v << ' ';
  return os.str();
}

// Empty when `got` is an acceptable result given the reference row `want`: identical in exact
// mode; otherwise the same format (min(topk, nvb) ascending ids, then -1) and the same set up to
// swaps of unforced blocks whose oracle scores are near-ties of the k-th selected score.
std::string compare_row(const oracle::IndexTopkInput& in, int64_t t, int64_t h,
                        const std::vector<int32_t>& want, const std::vector<int32_t>& got,
                        bool exact) {
  if (got == want) return "";
  const std::string ctx = "row " + std::to_string(t) + " head " + std::to_string(h) + ": want " +
                          row_string(want) + "got " + row_string(got);
  if (exact) return ctx;
  const std::vector<double> scores = oracle::index_block_scores(in, t, h);
  const int64_t nvb = static_cast<int64_t>(scores.size());
  const int64_t keep = std::min<int64_t>(in.topk, nvb);
  for (int64_t c = 0; c < in.width; ++c) {
    if (c >= keep && got[c] != -1) return ctx + "(expected -1 padding)";
    if (c < keep && (got[c] < 0 || got[c] >= nvb)) return ctx + "(id outside visible blocks)";
    if (c > 0 && c < keep && got[c] <= got[c - 1]) return ctx + "(not strictly ascending)";
  }
  const std::set<int32_t> want_set(want.begin(), want.begin() + keep);
  const std::set<int32_t> got_set(got.begin(), got.begin() + keep);
  double kth = std::numeric_limits<double>::infinity();
  for (int32_t b : want_set)
    if (oracle::index_block_tier(in, nvb, b) == 0) kth = std::min(kth, scores[b]);
  const double eps = kNearTieRelEps * (1.0 + std::fabs(kth));
  auto near_tie = [&](int32_t b) {
    return oracle::index_block_tier(in, nvb, b) == 0 && std::fabs(scores[b] - kth) <= eps;
  };
  for (int32_t b : want_set)
    if (!got_set.count(b) && !near_tie(b)) return ctx + "(missing block " + std::to_string(b) + ")";
  for (int32_t b : got_set)
    if (!want_set.count(b) && !near_tie(b)) return ctx + "(extra block " + std::to_string(b) + ")";
  return "";
}

// Compares rows [row0, row0 + rows) of the downloaded buffer `out` with `want_rows(h, t)` and
// checks that every other row of `out` still holds the poison.
template <typename WantFn>
void expect_rows(const oracle::IndexTopkInput& in, const TestTensor& out, int64_t row0,
                 int64_t rows, bool exact, WantFn want_rows) {
  int failures = 0;
  for (int64_t h = 0; h < out.shape()[0]; ++h) {
    for (int64_t r = 0; r < out.shape()[1]; ++r) {
      const std::vector<int32_t> got = out_row(out, h, r);
      std::string err;
      if (r < row0 || r >= row0 + rows) {
        for (int32_t v : got)
          if (v != kPoisonWord) err = "row " + std::to_string(r) + " outside the op was written";
      } else {
        err = compare_row(in, r - row0, h, want_rows(h, r - row0), got, exact);
      }
      if (!err.empty() && ++failures <= 5) ADD_FAILURE() << err;
    }
  }
  EXPECT_EQ(failures, 0);
}

// Runs the batch on the test device and checks it against the oracle, and on CUDA also against
// the CPU backend. Returns the downloaded output.
TestTensor run_and_check(const BatchSpec& spec) {
  Batch b = make_batch(spec, test_device());
  upload_all(b);
  const Status st = run_batch(b, b.topk_out.view(), Stream());
  EXPECT_TRUE(st.ok()) << st.to_string();
  b.topk_out.download();
  b.flags.download();
  EXPECT_EQ(b.flags.get_flat(0), 0.0);
  const std::vector<int32_t> want = oracle::index_topk(b.oracle_in);
  const int64_t rows = b.rows, width = spec.width;
  expect_rows(b.oracle_in, b.topk_out, 0, rows, spec.exact, [&](int64_t h, int64_t t) {
    const auto first = want.begin() + (h * rows + t) * width;
    return std::vector<int32_t>(first, first + width);
  });
  if (test_device().is_cuda()) {
    Batch c = make_batch(spec, Device::cpu());
    upload_all(c);
    const Status cst = run_batch(c, c.topk_out.view(), Stream());
    EXPECT_TRUE(cst.ok()) << cst.to_string();
    c.topk_out.download();
    expect_rows(b.oracle_in, b.topk_out, 0, rows, spec.exact,
                [&](int64_t h, int64_t t) { return out_row(c.topk_out, h, t); });
  }
  return std::move(b.topk_out);
}

// ---- Shared-case sweeps ----

struct SweepCase {
  DType q_dtype, k_dtype;
  int64_t heads;
  int query_len;
  bool exact;
};

std::string sweep_name(const ::testing::TestParamInfo<SweepCase>& info) {
  const SweepCase& c = info.param;
  return std::string(dtype_name(c.q_dtype)) + "_" + dtype_name(c.k_dtype) + "_H" +
         std::to_string(c.heads) + "_L" + std::to_string(c.query_len) +
         (c.exact ? "_exact" : "_random");
}

void PrintTo(const SweepCase& c, std::ostream* os) {
  *os << dtype_name(c.q_dtype) << " q, " << dtype_name(c.k_dtype) << " cache, " << c.heads
      << " heads, query_len " << c.query_len << (c.exact ? ", exact" : ", random");
}

// Block-table width past the CUDA selection's narrow-table rank count: it takes the sampled
// candidate path (and the radix descent when that falls back; see the decode sweep).
constexpr int64_t kWideTable = 300;

class IndexTopkDecodeSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(IndexTopkDecodeSweep, MatchesOracleOverContextLengths) {
  MSA_REQUIRE_TEST_DEVICE();
  const SweepCase& c = GetParam();
  BatchSpec s;
  s.q_dtype = c.q_dtype;
  s.k_dtype = c.k_dtype;
  s.heads = c.heads;
  s.query_len = c.query_len;
  s.exact = c.exact;
  // Padded requests (seq_len 0) at both ends and in the middle; every block boundary case.
  s.seq_lens = {0, 1, 127, 128, 129, 0, 2047, 2048, 2049, 4100, 0};
  if (c.query_len > 1) s.seq_lens.push_back(3);  // rows before position 0 are padding too
  s.seed = 100 + static_cast<uint64_t>(c.heads * 10 + c.query_len);
  // The CUDA selection counts ranks directly for block tables of at most 256 columns and on a
  // sampled candidate set for wider ones: both, on the same rows.
  for (int64_t cols : {int64_t{0}, kWideTable}) {
    s.table_cols = cols;
    run_and_check(s);
  }
}

// The CUDA scorer holds the query vectors of a decode request (query_len x heads) in one n-tile
// of 8 when they fit, in 4 otherwise: both, with both key types, exact and random, and the
// 4-tile one at its 32 vectors.
INSTANTIATE_TEST_SUITE_P(Cases, IndexTopkDecodeSweep,
                         ::testing::Values(SweepCase{DType::kBF16, DType::kBF16, 1, 1, true},
                                           SweepCase{DType::kBF16, DType::kBF16, 4, 4, true},
                                           SweepCase{DType::kE4M3, DType::kE4M3, 1, 4, true},
                                           SweepCase{DType::kBF16, DType::kE4M3, 2, 1, true},
                                           SweepCase{DType::kE4M3, DType::kBF16, 2, 4, true},
                                           SweepCase{DType::kBF16, DType::kBF16, 1, 1, false},
                                           SweepCase{DType::kBF16, DType::kBF16, 4, 4, false},
                                           SweepCase{DType::kE4M3, DType::kE4M3, 2, 1, false},
                                           SweepCase{DType::kBF16, DType::kE4M3, 1, 4, false},
                                           SweepCase{DType::kE4M3, DType::kE4M3, 4, 4, true},
                                           SweepCase{DType::kBF16, DType::kE4M3, 4, 4, false},
                                           SweepCase{DType::kBF16, DType::kBF16, 8, 4, true}),
                         sweep_name);

class IndexTopkPrefillSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(IndexTopkPrefillSweep, MatchesOracleWithAndWithoutPrefix) {
  MSA_REQUIRE_TEST_DEVICE();
  const SweepCase& c = GetParam();
  BatchSpec s;
  s.q_dtype = c.q_dtype;
  s.k_dtype = c.k_dtype;
  s.heads = c.heads;
  s.query_len = 0;
  s.exact = c.exact;
  // Prefix 0 (seq == q), chunked prefill with a prefix, a request with no rows this step.
  s.seq_lens = {300, 2049 + 64, 500, 129, 1};
  s.q_lens = {300, 64, 0, 2, 1};
  s.pad_rows = 3;
  s.seed = 200 + static_cast<uint64_t>(c.heads);
  run_and_check(s);
}

INSTANTIATE_TEST_SUITE_P(Cases, IndexTopkPrefillSweep,
                         ::testing::Values(SweepCase{DType::kBF16, DType::kBF16, 1, 0, true},
                                           SweepCase{DType::kE4M3, DType::kE4M3, 2, 0, true},
                                           SweepCase{DType::kBF16, DType::kE4M3, 4, 0, true},
                                           SweepCase{DType::kBF16, DType::kBF16, 2, 0, false},
                                           SweepCase{DType::kE4M3, DType::kBF16, 1, 0, false}),
                         sweep_name);

// Prefill shapes the CUDA backend scores on tensor cores (index head dim 128, block 128, both
// operands bf16 or both e4m3, at least 32 rows per request on average): 128-row query tiles that
// start mid-window (prefixes not multiples of the tile), several heads folded into the rows, the
// own block scored (local_blocks 0) or forced with more local and init blocks, a bad page.
struct TensorCoreCase {
  DType dtype;
  int64_t heads;
  int local_blocks, init_blocks;
  bool exact;
  bool dominant = false;
};

class IndexTopkPrefillTensorCore : public ::testing::TestWithParam<TensorCoreCase> {};

TEST_P(IndexTopkPrefillTensorCore, MatchesOracle) {
  MSA_REQUIRE_TEST_DEVICE();
  const TensorCoreCase& c = GetParam();
  BatchSpec s;
  s.q_dtype = s.k_dtype = c.dtype;
  s.heads = c.heads;
  s.head_dim = 128;
  s.query_len = 0;
  s.exact = c.exact;
  s.dominant = c.dominant;
  s.params.local_blocks = c.local_blocks;
  s.params.init_blocks = c.init_blocks;
  s.seq_lens = {700, 3000 + 450, 129, 2500};
  s.q_lens = {700, 450, 129, 0};
  s.pad_rows = 5;
  s.seed = 300 + static_cast<uint64_t>(c.heads * 10 + c.local_blocks);
  run_and_check(s);
}

INSTANTIATE_TEST_SUITE_P(Cases, IndexTopkPrefillTensorCore,
                         ::testing::Values(TensorCoreCase{DType::kBF16, 1, 1, 0, true},
                                           TensorCoreCase{DType::kBF16, 1, 1, 0, false},
                                           TensorCoreCase{DType::kE4M3, 1, 1, 0, true},
                                           TensorCoreCase{DType::kE4M3, 1, 1, 0, false},
                                           TensorCoreCase{DType::kBF16, 4, 0, 0, true},
                                           TensorCoreCase{DType::kE4M3, 2, 2, 1, true},
                                           TensorCoreCase{DType::kBF16, 2, 0, 2, false},
                                           TensorCoreCase{DType::kE4M3, 1, 1, 0, true, true},
                                           TensorCoreCase{DType::kBF16, 2, 1, 0, true, true}),
                         [](const ::testing::TestParamInfo<TensorCoreCase>& i) {
                           const TensorCoreCase& c = i.param;
                           return std::string(dtype_name(c.dtype)) + "_H" +
                                  std::to_string(c.heads) + "_local" +
                                  std::to_string(c.local_blocks) + "_init" +
                                  std::to_string(c.init_blocks) + (c.exact ? "_exact" : "_random") +
                                  (c.dominant ? "_dominant" : "");
                         });

// e4m3 prefill calls whose keys the CUDA backend converts once per call into an f16 copy
// (num_requests * 8192 <= H * T; 32 index heads, 4 tokens a tile): three requests, two after
// prefixes, keys padded past the head dim (the pad holds e4m3 NaN), drawn exact, dominant (which
// fp8 wgmma would get wrong) and random, one page per block or blocks shared between requests.
TEST(IndexTopk, PrefillE4m3KeyCopy) {
  MSA_REQUIRE_TEST_DEVICE();
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    BatchSpec s;
    s.q_dtype = s.k_dtype = DType::kE4M3;
    s.heads = 32;
    s.head_dim = 128;
    s.query_len = 0;
    s.key_pad = 16;
    s.exact = variant != 2;
    s.dominant = variant == 1;
    s.page_pool = variant == 2 ? 9 : 0;
    s.params.local_blocks = variant == 1 ? 0 : 1;
    s.seq_lens = {700, 429, 900};
    s.q_lens = {300, 300, 200};
    s.pad_rows = 3;
    s.seed = 1400 + static_cast<uint64_t>(variant);
    run_and_check(s);
  }
}

// workspace_size from capacities (docs/api.md): a workspace sized for T rows, R requests and MB
// block-table columns serves every call within them, so the size may only grow with each of the
// three (on CUDA it holds the block maxima, the tile plan and, for e4m3 keys, the per-call key
// copy, whose use depends on R against H * T). Shapes only: the views point at no memory the op
// reads.
TEST(IndexTopk, PrefillWorkspaceGrowsWithCapacities) {
  const Device dev = test_device();
  auto* fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
  const std::vector<int64_t> rows = {1, 200, 256, 300, 1000, 8192, 20000};
  const std::vector<int64_t> reqs = {1, 2, 3, 5, 64}, widths = {1, 8, 64, 1024};
  for (DType dtype : {DType::kBF16, DType::kE4M3}) {
    for (int64_t heads : {1, 32}) {
      auto size_at = [&](size_t ti, size_t ri, size_t wi) {
        const int64_t t = rows[ti], r = reqs[ri], mb = widths[wi];
        IndexTopkPrefillArgs a;
        a.index_q = make_tensor(fake, dtype, {t, heads, 128}, dev);
        a.index_cache = make_tensor(fake, dtype, {16, 128, 128}, dev);
        a.block_table = make_tensor(fake, DType::kI32, {r, mb}, dev);
        a.cu_seqlens_q = make_tensor(fake, DType::kI32, {r + 1}, dev);
        a.seq_lens = make_tensor(fake, DType::kI32, {r}, dev);
        a.topk_out = make_tensor(fake, DType::kI32, {heads, t, 16}, dev);
        size_t bytes = 0;
        const Status st = workspace_size(a, &bytes);
        EXPECT_TRUE(st.ok()) << st.to_string();
        return bytes;
      };
      for (size_t ti = 0; ti < rows.size(); ++ti) {
        for (size_t ri = 0; ri < reqs.size(); ++ri) {
          for (size_t wi = 0; wi < widths.size(); ++wi) {
            SCOPED_TRACE(std::string(dtype_name(dtype)) + ", H " + std::to_string(heads) + ", T " +
                         std::to_string(rows[ti]) + ", R " + std::to_string(reqs[ri]) + ", MB " +
                         std::to_string(widths[wi]));
            const size_t here = size_at(ti, ri, wi);
            if (ti + 1 < rows.size()) {
              EXPECT_LE(here, size_at(ti + 1, ri, wi));
            }
            if (ri + 1 < reqs.size()) {
              EXPECT_LE(here, size_at(ti, ri + 1, wi));
            }
            if (wi + 1 < widths.size()) {
              EXPECT_LE(here, size_at(ti, ri, wi + 1));
            }
          }
        }
      }
    }
  }
}

// Prefill selection over table widths and score orders: the CUDA backend selects prefill rows
// of tables of up to 1024 columns with one warp per row (32 lanes x 1 to 32 keys: the keys that
// reach the top-k-th largest lane maximum ranked, or, with more than 64 of them or a top-k above
// 32, rounds over every key) and wider tables with a CTA per row; rows from 1 visible block to
// 1020, scores ascending and descending (the kept blocks at either end of a lane's keys), all
// tied (decided by block id) and lane-skewed (33-64 candidates at 200 columns, the rounds at
// 1024), with and without init and local blocks, top-16 and (at 100 columns) top-40.
TEST(IndexTopk, PrefillSelectOverWidthsAndScoreOrders) {
  MSA_REQUIRE_TEST_DEVICE();
  for (ScoreOrder order : {ScoreOrder::kAscending, ScoreOrder::kDescending, ScoreOrder::kEqual,
                           ScoreOrder::kLaneSkewed}) {
    for (int64_t cols :
         {int64_t{0}, int64_t{40}, int64_t{100}, int64_t{200}, int64_t{1024}, int64_t{1025}}) {
      BatchSpec s;
      const bool wide = cols >= 1024;
      s.heads = wide ? 1 : 2;  // two heads: the warp select's items run over rows, then heads
      s.head_dim = 128;
      s.query_len = 0;
      s.order = order;
      s.table_cols = cols;
      s.params.init_blocks = cols == 40 ? 2 : 0;
      s.params.local_blocks = cols == 40 ? 3 : 1;
      if (cols == 100) {
        s.params.topk = 40;
        s.width = 48;
      }
      // A prompt from its first row (1 to 10 visible blocks), a chunk at 32 blocks, or near the
      // table's width from 100 columns (~1020 blocks when it is that wide), and a request with no
      // rows.
      s.seq_lens = {1200, wide ? 130560 - 40 : cols >= 100 ? 128 * cols - 600 : 4000, 900};
      s.q_lens = {1200, 16, 0};
      s.pad_rows = 2;
      s.seed = 500 + static_cast<uint64_t>(cols);
      run_and_check(s);
    }
  }
}

// ---- Focused cases ----

TEST(IndexTopk, LongContextDecode) {
  MSA_REQUIRE_TEST_DEVICE();
  for (bool exact : {true, false}) {
    BatchSpec s;
    s.heads = 2;
    s.head_dim = 128;
    s.query_len = 4;
    s.seq_lens = {65536 + 77, 0};
    s.exact = exact;
    s.seed = 7;
    run_and_check(s);
  }
}

// Without forced blocks the own, partial block competes on its score, which must only count keys
// j <= p: the page's later slots hold random values that would otherwise often win.
TEST(IndexTopk, NoForcedBlocksRespectsCausality) {
  MSA_REQUIRE_TEST_DEVICE();
  for (int query_len : {4, 0}) {
    BatchSpec s;
    s.heads = 2;
    s.query_len = query_len;
    s.seq_lens = {1000, 2000 + 70, 130};
    s.q_lens = {5, 70, 2};
    s.params.topk = 4;
    s.params.local_blocks = 0;
    s.seed = 21;
    run_and_check(s);
  }
}

TEST(IndexTopk, SmallerTopkPadsExtraColumns) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.heads = 2;
  s.query_len = 1;
  s.seq_lens = {3000, 129, 0, 700};
  s.params.topk = 4;
  s.width = 16;
  s.seed = 11;
  const TestTensor out = run_and_check(s);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t c = 4; c < 16; ++c) EXPECT_EQ(out.get({h, 0, c}), -1.0);
}

TEST(IndexTopk, InitAndLocalBlocksAreForced) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.heads = 1;
  s.query_len = 4;
  s.seq_lens = {5000, 300, 0};
  s.params.init_blocks = 1;
  s.params.local_blocks = 1;
  s.seed = 12;
  for (int64_t cols : {int64_t{0}, kWideTable}) {  // both CUDA selection paths
    s.table_cols = cols;
    const TestTensor out = run_and_check(s);
    // Row 3 is the last row of request 0 (p = 4999, own block 39): blocks 0 and 39 are kept.
    EXPECT_EQ(out.get({0, 3, 0}), 0.0);
    EXPECT_EQ(out.get({0, 3, 15}), 39.0);
  }
}

TEST(IndexTopk, InitTierOutranksLocalTierWhenForcedExceedTopk) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.query_len = 1;
  s.seq_lens = {128 * 20};
  s.params.topk = 3;
  s.params.init_blocks = 2;
  s.params.local_blocks = 3;
  s.width = 4;
  s.seed = 13;
  for (int64_t cols : {int64_t{0}, kWideTable}) {  // both CUDA selection paths
    s.table_cols = cols;
    const TestTensor out = run_and_check(s);
    // Both init blocks, then the lowest-id local block (17 of 17..19).
    EXPECT_EQ(out_row(out, 0, 0), (std::vector<int32_t>{0, 1, 17, -1}));
  }
}

// For tests that write b.index_cache after make_batch: the oracle gets the same keys, then the
// batch is uploaded and run and the top-k downloaded.
void run_with_edited_cache(Batch& b) {
  for (int64_t i = 0; i < b.index_cache.numel(); ++i)
    b.oracle_in.index_cache[i] = b.index_cache.get_flat(i);
  upload_all(b);
  const Status st = run_batch(b, b.topk_out.view(), Stream());
  EXPECT_TRUE(st.ok()) << st.to_string();
  b.topk_out.download();
}

// Scores set by block: every index query element 0.5 and every key element of request block blk
// value(blk), so the block scores 0.5 x head_dim x value(blk) (cache and the oracle's copy).
void set_block_values(Batch& b, const std::function<double(int64_t)>& value) {
  for (int64_t i = 0; i < b.index_q.numel(); ++i) b.index_q.set_flat(i, 0.5);
  b.oracle_in.index_q.assign(b.oracle_in.index_q.size(), 0.5);
  const BatchSpec& s = b.spec;
  const int64_t page_elems = s.block_size * s.head_dim;
  for (size_t r = 0; r < s.seq_lens.size(); ++r) {
    for (int64_t blk = 0; blk < ceil_div(s.seq_lens[r], s.block_size); ++blk) {
      const double v = value(blk);
      const int64_t page = b.oracle_in.block_table[r * b.oracle_in.max_blocks + blk];
      for (int64_t i = page * page_elems; i < (page + 1) * page_elems; ++i) {
        b.index_cache.set_flat(i, v);
        b.oracle_in.index_cache[i] = b.index_cache.get_flat(i);
      }
    }
  }
}

// Runs the batch as uploaded now and compares every row with the oracle's; no flags raised.
void run_and_check_rows(Batch& b) {
  upload_all(b);
  const Status st = run_batch(b, b.topk_out.view(), Stream());
  ASSERT_TRUE(st.ok()) << st.to_string();
  b.topk_out.download();
  b.flags.download();
  EXPECT_EQ(b.flags.get_flat(0), 0.0);
  expect_rows(b.oracle_in, b.topk_out, 0, b.rows, true,
              [&](int64_t h, int64_t t) { return oracle::index_topk_row(b.oracle_in, t, h); });
}

// Rows of 31 and 101 blocks: the CUDA narrow-table selection counts ranks for the first and runs
// its warp tournament for the second (more than 64 blocks), the wide table its candidate path.
TEST(IndexTopk, EqualScoresGoToLowerBlockIds) {
  MSA_REQUIRE_TEST_DEVICE();
  for (const int32_t own : {30, 100}) {
    BatchSpec s;
    s.heads = 2;
    s.query_len = 1;
    s.seq_lens = {128 * int64_t{own} + 5};
    s.seed = 14;
    for (int64_t cols : {int64_t{0}, kWideTable}) {  // both CUDA selection paths
      SCOPED_TRACE("own block " + std::to_string(own) + ", " + std::to_string(cols) + " columns");
      s.table_cols = cols;
      Batch b = make_batch(s, test_device());
      // Every key identical: all blocks score the same, so blocks 0..14 plus the own block.
      for (int64_t i = 0; i < b.index_cache.numel(); ++i)
        b.index_cache.set_flat(i, ((i % s.head_dim) % 5 - 2) / 8.0);
      run_with_edited_cache(b);
      std::vector<int32_t> want;
      for (int32_t i = 0; i < 15; ++i) want.push_back(i);
      want.push_back(own);
      for (int64_t h = 0; h < 2; ++h) {
        EXPECT_EQ(out_row(b.topk_out, h, 0), want);
        EXPECT_EQ(oracle::index_topk_row(b.oracle_in, 0, h), want);
      }
    }
  }
}

// Key dtype x query dtype: bf16 x bf16, e4m3 x bf16 and e4m3 x e4m3 (the CUDA scorer's f16 MMA
// path; every value here is exact in e4m3). Rows of 25 and 90 blocks with bf16 keys reach the
// CUDA narrow-table selection's rank count and its warp tournament.
TEST(IndexTopk, NanKeysRankBelowRealScores) {
  MSA_REQUIRE_TEST_DEVICE();
  struct Case {
    DType k_dtype, q_dtype;
    int64_t blocks;
  };
  const Case cases[] = {{DType::kBF16, DType::kBF16, 25},
                        {DType::kBF16, DType::kBF16, 90},
                        {DType::kE4M3, DType::kBF16, 25},
                        {DType::kE4M3, DType::kE4M3, 25}};
  for (const auto& [k_dtype, q_dtype, blocks] : cases) {
    SCOPED_TRACE(std::string(dtype_name(k_dtype)) + " keys, " + dtype_name(q_dtype) + " queries, " +
                 std::to_string(blocks) + " blocks");
    BatchSpec s;
    s.k_dtype = k_dtype;
    s.q_dtype = q_dtype;
    s.query_len = 1;
    s.seq_lens = {128 * (blocks - 1) + 1};
    s.seed = 15;
    s.table_cols = k_dtype == DType::kBF16 ? 0 : kWideTable;  // both CUDA selection paths
    Batch b = make_batch(s, test_device());
    const int64_t di = s.head_dim, bs = s.block_size;
    const std::vector<int32_t>& table = b.oracle_in.block_table;
    for (int64_t d = 0; d < di; ++d) b.index_q.set({0, 0, d}, 0.5);
    // Real keys score at most 0 (all entries <= 0); block 3 is all NaN, block 5 has NaN keys
    // plus one key scoring 0.5 * Di, so 5 must be kept and 3 must not.
    for (int64_t i = 0; i < b.index_cache.numel(); ++i)
      b.index_cache.set_flat(i, -static_cast<double>(i % 7) / 8.0);
    for (int64_t j = 0; j < bs; ++j) {
      b.index_cache.set({table[3], j, j % di}, std::nan(""));
      if (j % 2 == 0) b.index_cache.set({table[5], j, 1}, std::nan(""));
    }
    for (int64_t d = 0; d < di; ++d) b.index_cache.set({table[5], 7, d}, 1.0);
    b.oracle_in.index_q.assign(b.oracle_in.index_q.size(), 0.5);
    run_with_edited_cache(b);
    const std::vector<int32_t> got = out_row(b.topk_out, 0, 0);
    EXPECT_EQ(got, oracle::index_topk_row(b.oracle_in, 0, 0));
    EXPECT_EQ(std::count(got.begin(), got.end(), 3), 0) << row_string(got);
    EXPECT_EQ(std::count(got.begin(), got.end(), 5), 1) << row_string(got);
  }
}

// The same NaN rule in the prefill form (on CUDA the tensor-core scorer: bf16, and e4m3 through
// its f16 conversion), with the own block scored (local_blocks 0): 64 rows in the last of 25
// blocks. Block 3 is all NaN and must be dropped, block 5 has NaN keys and one key scoring
// 0.5 * 128 and must be kept. The own block's slot 127 also scores 0.5 * 128 but is visible to
// the last row alone, and its slot 100 has a NaN visible from row 36 on, so the own block's
// maximum depends on each row's position.
TEST(IndexTopk, PrefillNanKeysAndOwnBlockColumns) {
  MSA_REQUIRE_TEST_DEVICE();
  for (DType dtype : {DType::kBF16, DType::kE4M3}) {
    SCOPED_TRACE(dtype_name(dtype));
    BatchSpec s;
    s.q_dtype = s.k_dtype = dtype;
    s.head_dim = 128;
    s.query_len = 0;
    s.seq_lens = {25 * 128};
    s.q_lens = {64};
    s.params.local_blocks = 0;
    s.seed = 16;
    Batch b = make_batch(s, test_device());
    const int64_t di = s.head_dim, bs = s.block_size;
    const std::vector<int32_t>& table = b.oracle_in.block_table;
    for (int64_t t = 0; t < b.rows; ++t)
      for (int64_t d = 0; d < di; ++d) b.index_q.set({t, 0, d}, 0.5);
    b.oracle_in.index_q.assign(b.oracle_in.index_q.size(), 0.5);
    for (int64_t i = 0; i < b.index_cache.numel(); ++i)
      b.index_cache.set_flat(i, -static_cast<double>(i % 7) / 8.0);
    for (int64_t j = 0; j < bs; ++j) {
      b.index_cache.set({table[3], j, j % di}, std::nan(""));
      if (j % 2 == 0) b.index_cache.set({table[5], j, 1}, std::nan(""));
    }
    for (int64_t d = 0; d < di; ++d) {
      b.index_cache.set({table[5], 7, d}, 1.0);
      b.index_cache.set({table[24], 127, d}, 1.0);
    }
    b.index_cache.set({table[24], 100, 3}, std::nan(""));
    run_with_edited_cache(b);
    for (int64_t t = 0; t < b.rows; ++t) {
      const std::vector<int32_t> got = out_row(b.topk_out, 0, t);
      EXPECT_EQ(got, oracle::index_topk_row(b.oracle_in, t, 0)) << "row " << t;
      EXPECT_EQ(std::count(got.begin(), got.end(), 3), 0) << row_string(got);
      EXPECT_EQ(std::count(got.begin(), got.end(), 5), 1) << row_string(got);
      // Slot 127 wins the own block a place for the last row only.
      EXPECT_EQ(std::count(got.begin(), got.end(), 24), t == b.rows - 1 ? 1 : 0)
          << "row " << t << ": " << row_string(got);
    }
  }
}

// A wide table (1002 columns: 4 per selecting thread on CUDA) whose every fourth block scores
// low and the others high: the CUDA selection's sampled candidates (the first block of each
// thread's range) all score low, so far more than 256 blocks reach their threshold and the radix
// descent must take over. The kept set is the own block and the 15 lowest-id high blocks.
TEST(IndexTopk, WideTableWithLowSamplesSelectsExactly) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.query_len = 1;
  s.seq_lens = {128 * 1000};
  s.seed = 17;
  Batch b = make_batch(s, test_device());
  set_block_values(b, [](int64_t blk) { return blk % 4 == 0 ? -0.125 : 0.125; });
  run_with_edited_cache(b);
  std::vector<int32_t> want;
  for (int32_t blk = 1; want.size() < 15; ++blk) {
    if (blk % 4 != 0) want.push_back(blk);
  }
  want.push_back(999);
  EXPECT_EQ(out_row(b.topk_out, 0, 0), want);
  EXPECT_EQ(oracle::index_topk_row(b.oracle_in, 0, 0), want);
}

// The CUDA selection over row lengths around its switch points, top-k around the warp tops'
// capacity (32 at 8 selecting warps) and scores in four orders. Narrow tables (at most 256
// columns) count every visible block's rank, or, for rows of more than 64 blocks and top-k up to
// 16, find the k-th key by a warp tournament (here top-k 1, 4, 15 and 16). Wide ones (here 600
// columns, 3 blocks per selecting thread) rank a candidate set cut by a lower bound on the k-th
// key: the largest keys of the warps that hold the row's blocks (warp_tops_threshold) when they can
// gather k of them (at top-16: rows of more than 96 x 3 blocks), else samples; the radix descent
// when the candidates overflow. Scores that rise, fall or stay equal along the row put a warp's
// largest keys far apart, so the tops' bound lets most blocks through and the fallbacks run.
TEST(IndexTopk, SelectionOverLengthsWidthsAndScoreOrders) {
  MSA_REQUIRE_TEST_DEVICE();
  enum class Order { kRandom, kRising, kFalling, kEqual };
  for (Order order : {Order::kRandom, Order::kRising, Order::kFalling, Order::kEqual}) {
    for (bool wide : {false, true}) {
      BatchSpec s;
      s.query_len = 1;
      s.width = 34;  // every top-k below; the columns past it must read -1
      s.seed = 30 + static_cast<uint64_t>(order);
      s.seq_lens = wide ? std::vector<int64_t>{128 * 130, 128 * 300 + 1, 128 * 590}
                        : std::vector<int64_t>{128 * 64,  128 * 64 + 1,  128 * 97,
                                               128 * 128, 128 * 161 + 3, 128 * 254};
      s.table_cols = wide ? 600 : 0;
      Batch b = make_batch(s, test_device());
      if (order != Order::kRandom) {
        // bf16 rounds some neighbours on the rising and falling ramps to equal scores, which
        // then go to the lower id: exact either way.
        set_block_values(b, [order](int64_t blk) {
          return order == Order::kRising    ? blk / 1024.0 - 0.5
                 : order == Order::kFalling ? 0.5 - blk / 1024.0
                                            : 0.25;
        });
      }
      for (int topk : {1, 4, 15, 16, 17, 32, 33}) {
        SCOPED_TRACE("order " + std::to_string(static_cast<int>(order)) + ", topk " +
                     std::to_string(topk) + (wide ? ", wide table" : ", narrow table"));
        b.spec.params.topk = topk;
        b.oracle_in.topk = topk;
        run_and_check_rows(b);
      }
    }
  }
}

// Tables wider than 1024 columns: the CUDA select kernel keeps up to 8 keys per selecting thread
// in registers for tables of up to 2048 columns, 16 up to 4096, and re-reads the scores past that
// (select_keys_per_thread); each with random scores and with scores that rise along the row
// (the warp tops' bound then lets most blocks through and the fallbacks run).
TEST(IndexTopk, SelectionOverWiderTables) {
  MSA_REQUIRE_TEST_DEVICE();
  for (const int64_t cols : {1500, 3000, 5000}) {
    for (const bool rising : {false, true}) {
      SCOPED_TRACE(std::to_string(cols) + " columns" + (rising ? ", rising scores" : ""));
      BatchSpec s;
      s.query_len = 1;
      s.seq_lens = {128 * 1200 + 5, 0, 128 * 40};
      s.table_cols = cols;
      s.seed = 60 + static_cast<uint64_t>(cols);
      Batch b = make_batch(s, test_device());
      if (rising) set_block_values(b, [](int64_t blk) { return blk / 2048.0 - 0.25; });
      run_and_check_rows(b);
    }
  }
}

// The CUDA indexer selects a decode batch's top-k inside each request's cluster of score CTAs
// when one cluster per request fits on the GPU at once, else in a select kernel
// (core/launch_policy.h): on the H200, 200 requests of up to 16 blocks are 200 one-CTA
// clusters, 300 take the select kernel. The sweeps above cover multi-CTA clusters.
TEST(IndexTopk, ManyDecodeRequestsEitherSelectionPath) {
  MSA_REQUIRE_TEST_DEVICE();
  for (int requests : {200, 300}) {
    BatchSpec s;
    s.query_len = 1;
    std::mt19937_64 rng(static_cast<uint64_t>(requests));
    std::uniform_int_distribution<int64_t> len(0, 2048);
    for (int i = 0; i < requests; ++i) s.seq_lens.push_back(len(rng));
    s.table_cols = 16;
    s.seed = static_cast<uint64_t>(requests) + 5;
    run_and_check(s);
  }
}

// A ragged decode batch whose static grid is more than one wave of score CTAs: with e4m3 keys,
// or bf16 keys and at most 8 query vectors per request, the CUDA indexer then runs one wave of
// CTAs that share all requests' visible blocks, found from the lengths at run time
// (core/launch_policy.h, balanced_ctas). On the H200: 100 requests with
// 128-column tables of 64-token blocks (400 static CTAs of 32 blocks; a wave holds 264).
// Padding requests, every block-boundary case and random lengths; the one-tile scorer (e4m3
// queries, one row) and the four-tile one (bf16 queries, 4 rows x 2 heads).
BatchSpec balanced_spec(DType q_dtype, int64_t heads, int query_len, uint64_t seed,
                        DType k_dtype = DType::kE4M3) {
  BatchSpec s;
  s.q_dtype = q_dtype;
  s.k_dtype = k_dtype;
  s.heads = heads;
  s.query_len = query_len;
  s.block_size = 64;
  s.table_cols = 128;
  s.seq_lens = {0, 1, 63, 64, 65, 8192, 8191, 4096 + 33, 0};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> len(0, 8192);
  while (s.seq_lens.size() < 100) s.seq_lens.push_back(len(rng));
  s.seed = seed;
  return s;
}

TEST(IndexTopk, ManyRaggedRequestsBalancedGrid) {
  MSA_REQUIRE_TEST_DEVICE();
  run_and_check(balanced_spec(DType::kE4M3, 1, 1, 31));
  run_and_check(balanced_spec(DType::kBF16, 2, 4, 32));
  // bf16 keys (the one-tile instance; more query vectors keep the static grid).
  run_and_check(balanced_spec(DType::kBF16, 1, 1, 36, DType::kBF16));
  run_and_check(balanced_spec(DType::kE4M3, 2, 4, 37, DType::kBF16));
  run_and_check(balanced_spec(DType::kBF16, 4, 4, 38, DType::kBF16));
}

// Long ragged decode requests (e4m3 keys; bf16 keys with one query vector): the balanced grid's
// shares (about 150 blocks per CTA on the H200) are scored in pieces of up to 256 blocks for one
// (row, head) query vector and of up to 128 for 8 (detail::balanced_piece_blocks), so a piece
// holds more blocks than a static CTA and a share of 8 query vectors takes two (at head dim 64
// through the key ring, which each piece refills). 50 requests of 16K-35K tokens in 32-token blocks
// (one of them 1120 blocks long); their blocks are drawn from 600 pages, which keeps the cache and
// the oracle's copy small.
TEST(IndexTopk, BalancedGridLongPieces) {
  MSA_REQUIRE_TEST_DEVICE();
  for (const auto& [heads, query_len, q_dtype, di, k_dtype] :
       {std::tuple<int64_t, int, DType, int64_t, DType>{1, 1, DType::kE4M3, 128, DType::kE4M3},
        {2, 4, DType::kBF16, 128, DType::kE4M3},
        {2, 4, DType::kE4M3, 64, DType::kE4M3},
        {1, 1, DType::kBF16, 128, DType::kBF16}}) {
    SCOPED_TRACE(std::to_string(heads) + " heads x " + std::to_string(query_len) +
                 " rows, head dim " + std::to_string(di) + ", keys " + dtype_name(k_dtype));
    BatchSpec s;
    s.q_dtype = q_dtype;
    s.k_dtype = k_dtype;
    s.heads = heads;
    s.query_len = query_len;
    s.head_dim = di;
    s.block_size = 32;
    s.table_cols = 1120;
    s.page_pool = 600;
    s.seq_lens = {1120 * 32, 16384 + 1, 35000};
    std::mt19937_64 rng(70 + static_cast<uint64_t>(heads + di));
    std::uniform_int_distribution<int64_t> len(16384, 35000);
    while (s.seq_lens.size() < 50) s.seq_lens.push_back(len(rng));
    s.seed = 71 + static_cast<uint64_t>(heads + di);
    run_and_check(s);
  }
}

// balanced_spec (one row) at head dim `di` with `q_dtype` queries and tables of 8K tokens of
// block_size: the CUDA balanced grid scores 32-key warp tiles when blocks are a multiple of 32
// keys (64: two tiles per block; 32: one) and 16-key tiles otherwise (48), at head dims 64 and
// 128 with either query type.
BatchSpec wide_tile_balanced_spec(int64_t block_size, uint64_t seed, DType q_dtype = DType::kE4M3,
                                  int64_t di = 128) {
  BatchSpec s = balanced_spec(q_dtype, 1, 1, seed);
  s.head_dim = di;
  s.block_size = block_size;
  s.table_cols = (8192 + block_size - 1) / block_size;
  return s;
}

TEST(IndexTopk, ManyRaggedRequestsBalancedGridHeadDim128) {
  MSA_REQUIRE_TEST_DEVICE();
  for (const int64_t bs : {64, 32, 48}) {
    SCOPED_TRACE("block_size " + std::to_string(bs));
    run_and_check(wide_tile_balanced_spec(bs, 34 + static_cast<uint64_t>(bs)));
  }
}

TEST(IndexTopk, ManyRaggedRequestsBalancedGridWideTileInstances) {
  MSA_REQUIRE_TEST_DEVICE();
  for (const auto& [di, q_dtype] :
       {std::pair<int64_t, DType>{128, DType::kBF16}, {64, DType::kE4M3}, {64, DType::kBF16}}) {
    SCOPED_TRACE("head dim " + std::to_string(di) + ", queries " + dtype_name(q_dtype));
    run_and_check(wide_tile_balanced_spec(64, 36 + static_cast<uint64_t>(di), q_dtype, di));
  }
}

// A few long decode requests over e4m3 keys with 1024-column tables: the static grid (4 x 64 CTAs
// fit one wave on the H200) has 16-block CTAs, which CUDA runs with 32-key warp tiles when blocks
// are a multiple of 32 keys (32, 64) and with 16-key tiles otherwise (48) or with bf16 queries at
// head dim 128. A full table, padding, a partial last block and a request of two blocks.
BatchSpec long_static_spec(int64_t bs, DType q_dtype = DType::kE4M3, int64_t di = 128) {
  BatchSpec s;
  s.q_dtype = q_dtype;
  s.k_dtype = DType::kE4M3;
  s.head_dim = di;
  s.block_size = bs;
  s.table_cols = 1024;
  s.seq_lens = {1024 * bs, 0, 512 * bs + 17, bs + 1};
  s.seed = 50 + static_cast<uint64_t>(bs);
  return s;
}

TEST(IndexTopk, LongStaticCtasHeadDim128) {
  MSA_REQUIRE_TEST_DEVICE();
  for (const int64_t bs : {32, 64, 48}) {
    SCOPED_TRACE("block_size " + std::to_string(bs));
    run_and_check(long_static_spec(bs));
  }
}

TEST(IndexTopk, LongStaticCtasOtherScorerInstances) {
  MSA_REQUIRE_TEST_DEVICE();
  for (const auto& [di, q_dtype] :
       {std::pair<int64_t, DType>{128, DType::kBF16}, {64, DType::kE4M3}, {64, DType::kBF16}}) {
    SCOPED_TRACE("head dim " + std::to_string(di) + ", queries " + dtype_name(q_dtype));
    run_and_check(long_static_spec(64, q_dtype, di));
  }
}

// Narrow tables (at most 256 columns) with a top-k from above a warp's 32 keys up to the table
// width less one: the CUDA rank count then keeps most of a row, the kept blocks of a warp are
// not contiguous, and the -1 padding is a single column.
TEST(IndexTopk, NarrowTablesWithLargeTopk) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.heads = 2;
  s.query_len = 2;
  s.seq_lens = {128 * 256, 128 * 200 + 7, 128 * 40 + 1, 128 * 255 + 1};
  s.width = 256;
  s.seed = 71;
  for (int topk : {33, 100, 255}) {
    SCOPED_TRACE("topk " + std::to_string(topk));
    s.params.topk = topk;
    run_and_check(s);
  }
}

TEST(IndexTopk, FewVisibleBlocksSelectsAll) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.query_len = 1;
  s.seq_lens = {2048, 1000};
  s.width = 20;
  s.seed = 16;
  const TestTensor out = run_and_check(s);
  for (int32_t c = 0; c < 20; ++c) {
    EXPECT_EQ(out.get({0, 0, c}), c < 16 ? c : -1.0);
    EXPECT_EQ(out.get({0, 1, c}), c < 8 ? c : -1.0);
  }
}

TEST(IndexTopk, OtherBlockSize) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec s;
  s.heads = 2;
  s.block_size = 64;
  s.query_len = 0;
  s.seq_lens = {1500, 64, 65};
  s.q_lens = {20, 64, 1};
  s.params.topk = 8;
  s.seed = 17;
  run_and_check(s);
}

// Padded key rows (a cache row that carries more than the key): the tensor-core scorers load e4m3
// keys 16 bytes at a time, so rows 8 bytes past a 16-byte multiple go to the SIMT scorer on
// CUDA; both kinds of layout, both scorers, decode and prefill, against the oracle.
TEST(IndexTopk, PaddedE4m3KeyRows) {
  MSA_REQUIRE_TEST_DEVICE();
  for (const int64_t pad : {8, 16, 24}) {
    for (const int query_len : {1, 0}) {
      SCOPED_TRACE("key pad " + std::to_string(pad) + ", query_len " + std::to_string(query_len));
      BatchSpec s;
      s.q_dtype = DType::kE4M3;
      s.k_dtype = DType::kE4M3;
      s.head_dim = 128;
      s.heads = 2;
      s.key_pad = pad;
      s.query_len = query_len;
      s.seq_lens = {3000, 700};
      if (query_len == 0) s.q_lens = {5, 3};
      s.seed = 40 + static_cast<uint64_t>(pad) + static_cast<uint64_t>(query_len);
      run_and_check(s);
    }
  }
}

// Decode rows [0, nd) and prefill rows [nd, nd + tp) share one [H, T, K] buffer and one index_q
// buffer, as in a mixed step; rows after nd + tp stay untouched.
TEST(IndexTopk, MixedBatchSharesOneBuffer) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec dec;
  dec.heads = 2;
  dec.query_len = 2;
  dec.seq_lens = {2100, 0, 130};
  dec.seed = 18;
  BatchSpec pre = dec;
  pre.query_len = 0;
  pre.seq_lens = {900, 3000};
  pre.q_lens = {900, 40};
  pre.seed = 19;
  Batch d = make_batch(dec, test_device());
  Batch p = make_batch(pre, test_device());
  const int64_t nd = d.rows, tp = p.rows, spare = 3;
  TestTensor q_all(DType::kBF16, {nd + tp, 2, dec.head_dim}, test_device());
  for (int64_t t = 0; t < nd + tp; ++t)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t k = 0; k < dec.head_dim; ++k)
        q_all.set({t, h, k}, t < nd ? d.index_q.get({t, h, k}) : p.index_q.get({t - nd, h, k}));
  q_all.upload();
  TestTensor shared(DType::kI32, {2, nd + tp + spare, dec.width}, test_device());
  shared.fill_bytes(kPoisonByte);
  shared.upload();
  upload_all(d);
  upload_all(p);
  const TensorView all = shared.view();
  ASSERT_TRUE(run_batch(d, all.slice(1, 0, nd), Stream(), true, q_all.view().slice(0, 0, nd)).ok());
  ASSERT_TRUE(
      run_batch(p, all.slice(1, nd, tp), Stream(), true, q_all.view().slice(0, nd, tp)).ok());
  shared.download();
  const std::vector<int32_t> want_d = oracle::index_topk(d.oracle_in);
  const std::vector<int32_t> want_p = oracle::index_topk(p.oracle_in);
  const int64_t w = dec.width;
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t r = 0; r < nd + tp + spare; ++r) {
      std::vector<int32_t> want(static_cast<size_t>(w), kPoisonWord);
      if (r < nd) {
        want.assign(want_d.begin() + (h * nd + r) * w, want_d.begin() + (h * nd + r + 1) * w);
      } else if (r < nd + tp) {
        const int64_t t = r - nd;
        want.assign(want_p.begin() + (h * tp + t) * w, want_p.begin() + (h * tp + t + 1) * w);
      }
      EXPECT_EQ(out_row(shared, h, r), want) << "head " << h << " row " << r;
    }
  }
}

TEST(IndexTopk, BitwiseIdenticalAcrossThreadCounts) {
  MSA_REQUIRE_TEST_DEVICE();
  for (int form : {1, 0}) {
    BatchSpec s;
    s.heads = 4;
    s.query_len = form;
    s.seq_lens = {3000, 0, 129, 6000};
    s.q_lens = {17, 0, 5, 9};
    s.exact = false;
    s.seed = 20;
    Batch b = make_batch(s, test_device());
    std::vector<uint8_t> first;
    for (int threads : {1, 2, 8}) {
      upload_all(b);
      ASSERT_TRUE(run_batch(b, b.topk_out.view(), Stream{nullptr, threads}).ok());
      b.topk_out.download();
      if (first.empty()) {
        first = b.topk_out.host_bytes();
      } else {
        EXPECT_EQ(b.topk_out.host_bytes(), first) << threads << " threads, form " << form;
      }
    }
  }
}

// ---- Bad inputs ----

BatchSpec small_spec(int query_len) {
  BatchSpec s;
  s.heads = 2;
  s.query_len = query_len;
  s.seq_lens = {300, 0, 129};
  s.q_lens = {4, 0, 2};
  s.pad_rows = 1;
  s.seed = 30;
  return s;
}

IndexTopkDecodeArgs decode_args(const Batch& b) {
  IndexTopkDecodeArgs a;
  a.params = b.spec.params;
  a.query_len = b.spec.query_len;
  a.index_q = b.index_q.view();
  a.index_cache = b.index_cache.view();
  a.block_table = b.block_table.view();
  a.seq_lens = b.seq_lens.view();
  a.topk_out = b.topk_out.view();
  a.error_flags = b.flags.view();
  return a;
}

IndexTopkPrefillArgs prefill_args(const Batch& b) {
  IndexTopkPrefillArgs a;
  a.params = b.spec.params;
  a.index_q = b.index_q.view();
  a.index_cache = b.index_cache.view();
  a.block_table = b.block_table.view();
  a.cu_seqlens_q = b.cu_seqlens_q.view();
  a.seq_lens = b.seq_lens.view();
  a.topk_out = b.topk_out.view();
  a.error_flags = b.flags.view();
  return a;
}

// Runs `args` expecting `code`; the output must keep its poison.
template <typename Args>
void expect_rejected(Batch& b, const Args& args, StatusCode code, const char* what) {
  SCOPED_TRACE(what);
  upload_all(b);
  size_t bytes = 0;
  // A bad host argument fails workspace_size too; size the workspace from the good batch.
  if (code != StatusCode::kInvalidArgument) {
    ASSERT_TRUE(workspace_size(args, &bytes).ok());
  } else {
    EXPECT_EQ(workspace_size(args, &bytes).code(), code);
    EXPECT_EQ(check(args).code(), code);
    bytes = 1 << 20;
  }
  DeviceBuffer ws(b.device, bytes);
  const Status st = run(args, ws.workspace(), Stream());
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_FALSE(st.message().empty());
  b.topk_out.download();
  for (uint8_t byte : b.topk_out.host_bytes()) {
    if (byte != kPoisonByte) {
      ADD_FAILURE() << "topk_out was written";
      break;
    }
  }
}

TEST(IndexTopkBadInput, HostArgumentsDecode) {
  MSA_REQUIRE_TEST_DEVICE();
  Batch b = make_batch(small_spec(2), test_device());
  const IndexTopkDecodeArgs good = decode_args(b);
  ASSERT_TRUE(check(good).ok()) << check(good).to_string();
  const auto bad = StatusCode::kInvalidArgument;
  IndexTopkDecodeArgs a = good;
  a.index_q.dtype = DType::kF32;
  expect_rejected(b, a, bad, "index_q dtype");
  a = good;
  a.index_cache.dtype = DType::kF16;
  expect_rejected(b, a, bad, "index_cache dtype");
  a = good;
  a.index_cache.shape[2] = 32;
  expect_rejected(b, a, bad, "head dim mismatch");
  a = good;
  a.index_cache.shape[1] = 0;
  expect_rejected(b, a, bad, "block_size 0");
  a = good;
  a.topk_out = a.topk_out.slice(0, 0, 1);
  expect_rejected(b, a, bad, "H_idx mismatch");
  a = good;
  a.topk_out = a.topk_out.slice(1, 0, a.index_q.shape[0] - 1);
  expect_rejected(b, a, bad, "topk_out rows < T");
  a = good;
  a.topk_out.dtype = DType::kI64;
  expect_rejected(b, a, bad, "topk_out dtype");
  a = good;
  a.params.topk = 0;
  expect_rejected(b, a, bad, "topk 0");
  a = good;
  a.params.topk = 17;
  expect_rejected(b, a, bad, "topk above capacity");
  a = good;
  a.params.init_blocks = -1;
  expect_rejected(b, a, bad, "init_blocks");
  a = good;
  a.params.local_blocks = -1;
  expect_rejected(b, a, bad, "local_blocks");
  a = good;
  a.query_len = 0;
  expect_rejected(b, a, bad, "query_len 0");
  a = good;
  a.query_len = 9;
  expect_rejected(b, a, bad, "query_len 9");
  a = good;
  a.query_len = 1;
  expect_rejected(b, a, bad, "index_q rows != B * query_len");
  a = good;
  a.block_table = a.block_table.slice(0, 0, 2);
  expect_rejected(b, a, bad, "block_table rows");
  a = good;
  a.seq_lens.dtype = DType::kI64;
  expect_rejected(b, a, bad, "seq_lens dtype");
  a = good;
  a.index_cache.device = test_device().is_cpu() ? Device::cuda(0) : Device::cpu();
  expect_rejected(b, a, bad, "index_cache device");
  a = good;
  a.error_flags.dtype = DType::kF32;
  expect_rejected(b, a, bad, "error_flags dtype");
}

TEST(IndexTopkBadInput, HostArgumentsPrefill) {
  MSA_REQUIRE_TEST_DEVICE();
  Batch b = make_batch(small_spec(0), test_device());
  const IndexTopkPrefillArgs good = prefill_args(b);
  ASSERT_TRUE(check(good).ok()) << check(good).to_string();
  const auto bad = StatusCode::kInvalidArgument;
  IndexTopkPrefillArgs a = good;
  a.cu_seqlens_q = a.cu_seqlens_q.slice(0, 0, 3);
  expect_rejected(b, a, bad, "cu_seqlens_q length");
  a = good;
  a.cu_seqlens_q.dtype = DType::kI64;
  expect_rejected(b, a, bad, "cu_seqlens_q dtype");
  a = good;
  a.params.topk = 20;
  expect_rejected(b, a, bad, "topk above capacity");
  a = good;
  a.topk_out = a.topk_out.slice(2, 0, 8);
  a.params.topk = 9;
  expect_rejected(b, a, bad, "topk above a narrower capacity");
  a = good;
  a.seq_lens = a.seq_lens.slice(0, 0, 2);
  expect_rejected(b, a, bad, "seq_lens length");
}

// A bad value: kOutOfRange on the CPU with nothing written; on CUDA the flag bit is raised.
template <typename Args>
void expect_bad_value(Batch& b, const Args& args, int32_t bit, const char* what) {
  SCOPED_TRACE(what);
  if (test_device().is_cpu()) {
    expect_rejected(b, args, StatusCode::kOutOfRange, what);
  } else {
    upload_all(b);
    size_t bytes = 0;
    ASSERT_TRUE(workspace_size(args, &bytes).ok());
    DeviceBuffer ws(b.device, bytes);
    ASSERT_TRUE(run(args, ws.workspace(), Stream()).ok());
  }
  b.flags.download();
  EXPECT_EQ(static_cast<int32_t>(b.flags.get_flat(0)) & bit, bit);
}

// bf16 keys, and e4m3 keys and queries (on CUDA the one-query-tile scorer instance: 2 rows x 2
// heads per request).
class IndexTopkBadDecodeValues : public ::testing::TestWithParam<DType> {};

TEST_P(IndexTopkBadDecodeValues, AreReportedAndSkipped) {
  MSA_REQUIRE_TEST_DEVICE();
  BatchSpec spec = small_spec(2);
  spec.q_dtype = GetParam();
  spec.k_dtype = GetParam();
  Batch b = make_batch(spec, test_device());
  const IndexTopkDecodeArgs a = decode_args(b);
  const std::vector<int32_t> table = b.oracle_in.block_table;
  const int64_t mb = b.oracle_in.max_blocks;
  const int64_t num_blocks = b.index_cache.shape()[0];

  b.block_table.set({2, 1}, static_cast<double>(num_blocks));
  expect_bad_value(b, a, kDeviceErrorBlockId, "block id >= num_blocks");
  b.block_table.set({0, 2}, -1);
  b.block_table.set({2, 1}, table[2 * mb + 1]);
  expect_bad_value(b, a, kDeviceErrorBlockId, "negative block id");
  b.block_table.set({0, 2}, table[2]);

  b.seq_lens.set_flat(1, -3);
  expect_bad_value(b, a, kDeviceErrorSeqLen, "negative seq_len");
  b.seq_lens.set_flat(1, static_cast<double>(128 * mb + 1));
  expect_bad_value(b, a, kDeviceErrorSeqLen, "seq_len beyond the block table");
  b.seq_lens.set_flat(1, 0);

  // Stale entries past the used blocks are never read: the restored batch runs fine.
  upload_all(b);
  Status st = run_batch(b, b.topk_out.view(), Stream());
  EXPECT_TRUE(st.ok()) << st.to_string();
  b.flags.download();
  EXPECT_EQ(b.flags.get_flat(0), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, IndexTopkBadDecodeValues,
                         ::testing::Values(DType::kBF16, DType::kE4M3),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(dtype_name(p.param));
                         });

// Bad values in a decode batch: page id `blk` of request `req` (a block every row of the request
// sees) past the cache and negative, and request `len_req`'s length past its block table; each is
// flagged (whichever CTA scores the block or, for the length, the request's block 0), and with
// the values restored (request `len_req` to `len_ok`) nothing is.
void expect_bad_values_at(const BatchSpec& spec, int64_t req, int64_t blk, int64_t len_req,
                          int64_t len_ok) {
  Batch b = make_batch(spec, test_device());
  const IndexTopkDecodeArgs a = decode_args(b);
  const int64_t mb = b.oracle_in.max_blocks;
  const int64_t num_blocks = b.index_cache.shape()[0];
  const double page = b.block_table.get({req, blk});

  b.block_table.set({req, blk}, static_cast<double>(num_blocks));
  expect_bad_value(b, a, kDeviceErrorBlockId, "block id >= num_blocks");
  b.block_table.set({req, blk}, -1);
  expect_bad_value(b, a, kDeviceErrorBlockId, "negative block id");
  b.block_table.set({req, blk}, page);

  b.seq_lens.set_flat(len_req, static_cast<double>(spec.block_size * mb + 1));
  expect_bad_value(b, a, kDeviceErrorSeqLen, "seq_len beyond the block table");
  b.seq_lens.set_flat(len_req, static_cast<double>(len_ok));

  upload_all(b);
  const Status st = run_batch(b, b.topk_out.view(), Stream());
  EXPECT_TRUE(st.ok()) << st.to_string();
  b.flags.download();
  EXPECT_EQ(b.flags.get_flat(0), 0.0);
}

// Bad values in a batch that takes the balanced grid on CUDA (balanced_spec: request 5 sees all
// 128 blocks; request 60 takes the bad length, then 0, a padding request's).
void expect_bad_values_in_balanced_grid(const BatchSpec& spec) {
  expect_bad_values_at(spec, 5, 100, 60, 0);
}

TEST(IndexTopkBadInput, ValuesInBalancedGrid) {
  MSA_REQUIRE_TEST_DEVICE();
  {
    SCOPED_TRACE("16-key tiles");
    expect_bad_values_in_balanced_grid(balanced_spec(DType::kE4M3, 1, 1, 33));
  }
  for (const int64_t di : {64, 128}) {
    SCOPED_TRACE("bf16 keys, head dim " + std::to_string(di));
    BatchSpec s = balanced_spec(DType::kBF16, 1, 1, 39, DType::kBF16);
    s.head_dim = di;
    expect_bad_values_in_balanced_grid(s);
  }
  // CUDA: the register double buffer at head dim 128, the shared-memory key ring at 64.
  for (const int64_t di : {128, 64}) {
    SCOPED_TRACE("32-key tiles, head dim " + std::to_string(di));
    expect_bad_values_in_balanced_grid(wide_tile_balanced_spec(64, 35, DType::kE4M3, di));
  }
}

// Bad page ids and lengths on the long static CTAs of long_static_spec (32-key tiles on CUDA):
// request 0 sees all 1024 blocks, request 3 is two blocks long.
TEST(IndexTopkBadInput, ValuesOnLongStaticCtas) {
  MSA_REQUIRE_TEST_DEVICE();
  expect_bad_values_at(long_static_spec(64), 0, 700, 3, 65);
}

TEST(IndexTopkBadInput, ValuesPrefill) {
  MSA_REQUIRE_TEST_DEVICE();
  Batch b = make_batch(small_spec(0), test_device());
  const IndexTopkPrefillArgs a = prefill_args(b);
  const int64_t rows = b.rows;

  b.cu_seqlens_q.set_flat(0, 1);
  expect_bad_value(b, a, kDeviceErrorQueryLen, "cu_seqlens_q[0] != 0");
  b.cu_seqlens_q.set_flat(0, 0);
  b.cu_seqlens_q.set_flat(2, 3);
  expect_bad_value(b, a, kDeviceErrorQueryLen, "decreasing cu_seqlens_q");
  b.cu_seqlens_q.set_flat(2, 4);
  b.cu_seqlens_q.set_flat(3, static_cast<double>(rows + 1));
  expect_bad_value(b, a, kDeviceErrorQueryLen, "cu_seqlens_q beyond T");
  b.cu_seqlens_q.set_flat(3, 6);
  b.seq_lens.set_flat(2, 1);
  expect_bad_value(b, a, kDeviceErrorQueryLen, "query rows > seq_len");
  b.seq_lens.set_flat(2, -1);
  expect_bad_value(b, a, kDeviceErrorSeqLen, "negative seq_len");
  b.seq_lens.set_flat(2, 129);
  b.block_table.set({0, 1}, 1 << 20);
  expect_bad_value(b, a, kDeviceErrorBlockId, "block id >= num_blocks");
  b.block_table.set({0, 1}, b.oracle_in.block_table[1]);

  upload_all(b);
  Status st = run_batch(b, b.topk_out.view(), Stream());
  EXPECT_TRUE(st.ok()) << st.to_string();
}

// A prefill call that takes the CUDA scorer's per-call e4m3 key copy (32 heads x 600 rows over
// two requests: num_requests * 8192 <= H * T).
BatchSpec key_copy_spec(uint64_t seed) {
  BatchSpec s;
  s.q_dtype = s.k_dtype = DType::kE4M3;
  s.heads = 32;
  s.head_dim = 128;
  s.query_len = 0;
  s.seq_lens = {700, 429};
  s.q_lens = {300, 300};
  s.seed = seed;
  return s;
}

// Page ids past the cache and negative in a prefill call that takes the CUDA scorer's per-call
// e4m3 key copy: flagged, and the restored call runs clean (each check uploads the batch with its
// flag cleared).
TEST(IndexTopkBadInput, ValuesPrefillE4m3KeyCopy) {
  MSA_REQUIRE_TEST_DEVICE();
  Batch b = make_batch(key_copy_spec(1410), test_device());
  const IndexTopkPrefillArgs a = prefill_args(b);
  const double page = b.block_table.get({1, 2});
  b.block_table.set({1, 2}, static_cast<double>(b.index_cache.shape()[0]));
  expect_bad_value(b, a, kDeviceErrorBlockId, "block id >= num_blocks");
  b.block_table.set({1, 2}, -1);
  expect_bad_value(b, a, kDeviceErrorBlockId, "negative block id");
  b.block_table.set({1, 2}, page);
  run_and_check_rows(b);
}

// On CUDA, a call that takes the scorer's per-call f16 key copy (bulk tensor copies) needs the
// workspace aligned to 256 bytes as Workspace documents: a misaligned one is rejected before
// anything is written. The CPU backend has no such copy.
TEST(IndexTopkBadInput, KeyCopyRejectsMisalignedWorkspace) {
  MSA_REQUIRE_TEST_DEVICE();
  if (test_device().is_cpu()) GTEST_SKIP() << "no per-call copy on the CPU backend";
  Batch b = make_batch(key_copy_spec(1411), test_device());
  upload_all(b);  // topk_out poisoned
  const IndexTopkPrefillArgs a = prefill_args(b);
  size_t bytes = 0;
  ASSERT_TRUE(workspace_size(a, &bytes).ok());
  DeviceBuffer buffer(b.device, bytes + 256);
  const Workspace ws{static_cast<char*>(buffer.workspace().data) + 16, bytes};
  const Status st = run(a, ws, Stream());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.to_string().find("aligned to 256 bytes"), std::string::npos) << st.to_string();
  b.topk_out.download();
  for (int64_t i = 0; i < b.topk_out.numel(); ++i) {
    ASSERT_EQ(static_cast<int32_t>(b.topk_out.get_flat(i)), kPoisonWord) << "element " << i;
  }
}

}  // namespace
}  // namespace test
}  // namespace msa
