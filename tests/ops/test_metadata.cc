// Batch metadata op (spec A8) on the test device against the oracle; on CUDA also against the
// CPU backend. All outputs are integers, so every comparison is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/paging.h"
#include "common/test_tensor.h"
#include "msa/metadata.h"
#include "oracle/metadata_oracle.h"

namespace msa {
namespace test {
namespace {

// Caller-owned workspace memory on a device.
class DeviceBuffer {
 public:
  DeviceBuffer(const Device& device, size_t bytes)
      : device_(device), data_(device_alloc(device, bytes == 0 ? 1 : bytes)), bytes_(bytes) {}
  ~DeviceBuffer() { device_free(device_, data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  Workspace workspace() const { return Workspace{data_, bytes_}; }

 private:
  Device device_;
  void* data_;
  size_t bytes_;
};

TestTensor vector_tensor(DType dtype, const std::vector<int64_t>& values, const Device& device) {
  TestTensor t(dtype, {static_cast<int64_t>(values.size())}, device);
  for (size_t i = 0; i < values.size(); ++i) t.set_flat(static_cast<int64_t>(i), values[i]);
  t.upload();
  return t;
}

TestTensor table_tensor(const std::vector<int32_t>& table, int64_t rows, int64_t columns,
                        const Device& device) {
  TestTensor t(DType::kI32, {rows, columns}, device);
  for (size_t i = 0; i < table.size(); ++i) t.set_flat(static_cast<int64_t>(i), table[i]);
  t.upload();
  return t;
}

// Every input and output tensor of one call, on one device.
struct MetadataBuffers {
  TestTensor query_lens, seq_lens, block_table, index_block_table;
  TestTensor query_start_loc, cu_seqlens_q, cu_seqlens_k, context_lens, kv_block_counts;
  TestTensor token_request, token_position, slot_mapping, index_slot_mapping, totals;
  TestTensor error_flags;

  // The outputs, for poisoning, filling with a pattern and comparing.
  std::vector<TestTensor*> outputs() {
    return {&query_start_loc, &cu_seqlens_q,   &cu_seqlens_k, &context_lens,       &kv_block_counts,
            &token_request,   &token_position, &slot_mapping, &index_slot_mapping, &totals};
  }
};

MetadataBuffers make_buffers(const oracle::MetadataInput& in, const Device& device) {
  const int64_t batch = static_cast<int64_t>(in.query_lens.size());
  const int64_t prefills = batch - in.num_decode_requests;
  const int64_t cap = in.token_capacity;
  MetadataBuffers b;
  b.query_lens = vector_tensor(DType::kI32, in.query_lens, device);
  b.seq_lens = vector_tensor(DType::kI32, in.seq_lens, device);
  b.block_table = table_tensor(in.block_table, batch, in.max_blocks, device);
  if (!in.index_block_table.empty()) {
    b.index_block_table = table_tensor(in.index_block_table, batch, in.index_max_blocks, device);
  }
  b.query_start_loc = TestTensor(DType::kI32, {batch + 1}, device);
  b.cu_seqlens_q = TestTensor(DType::kI32, {prefills + 1}, device);
  b.cu_seqlens_k = TestTensor(DType::kI32, {prefills + 1}, device);
  b.context_lens = TestTensor(DType::kI32, {batch}, device);
  b.kv_block_counts = TestTensor(DType::kI32, {batch}, device);
  b.token_request = TestTensor(DType::kI32, {cap}, device);
  b.token_position = TestTensor(DType::kI32, {cap}, device);
  b.slot_mapping = TestTensor(DType::kI64, {cap}, device);
  b.index_slot_mapping = TestTensor(DType::kI64, {cap}, device);
  b.totals = TestTensor(DType::kI32, {4}, device);
  b.error_flags = vector_tensor(DType::kI32, {0}, device);
  return b;
}

BatchMetadataArgs make_args(const oracle::MetadataInput& in, const MetadataBuffers& b) {
  BatchMetadataArgs a;
  a.num_decode_requests = static_cast<int>(in.num_decode_requests);
  a.decode_query_len = static_cast<int>(in.decode_query_len);
  a.block_size = static_cast<int>(in.block_size);
  a.query_lens = b.query_lens.view();
  a.seq_lens = b.seq_lens.view();
  a.block_table = b.block_table.view();
  if (!in.index_block_table.empty()) {
    a.index_block_table = b.index_block_table.view();
    a.index_slot_mapping = b.index_slot_mapping.view();
  }
  a.query_start_loc = b.query_start_loc.view();
  a.prefill_cu_seqlens_q = b.cu_seqlens_q.view();
  a.prefill_cu_seqlens_k = b.cu_seqlens_k.view();
  a.context_lens = b.context_lens.view();
  a.kv_block_counts = b.kv_block_counts.view();
  a.token_request = b.token_request.view();
  a.token_position = b.token_position.view();
  a.slot_mapping = b.slot_mapping.view();
  a.totals = b.totals.view();
  a.error_flags = b.error_flags.view();
  return a;
}

Status run_metadata(const BatchMetadataArgs& args, const Device& device, int cpu_threads = 0) {
  size_t bytes = 0;
  Status s = workspace_size(args, &bytes);
  if (!s.ok()) return s;
  DeviceBuffer ws(device, bytes);
  Stream stream;
  stream.cpu_threads = cpu_threads;
  return run(args, ws.workspace(), stream);
}

std::vector<int64_t> values(const TestTensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<int64_t>(t.get_flat(i)));
  return v;
}

// Runs the case with every output on `device` (poisoned first, so each element must be
// written) and returns the downloaded buffers.
MetadataBuffers run_case(const oracle::MetadataInput& in, const Device& device,
                         int cpu_threads = 0) {
  MetadataBuffers b = make_buffers(in, device);
  for (TestTensor* t : b.outputs()) t->poison_device();
  const BatchMetadataArgs args = make_args(in, b);
  const Status s = run_metadata(args, device, cpu_threads);
  EXPECT_TRUE(s.ok()) << s.to_string();
  for (TestTensor* t : b.outputs()) t->download();
  b.error_flags.download();
  return b;
}

void expect_matches_oracle(const oracle::MetadataInput& in, MetadataBuffers& b) {
  const oracle::MetadataOutput want = oracle::batch_metadata(in);
  EXPECT_EQ(values(b.query_start_loc), want.query_start_loc);
  EXPECT_EQ(values(b.cu_seqlens_q), want.prefill_cu_seqlens_q);
  EXPECT_EQ(values(b.cu_seqlens_k), want.prefill_cu_seqlens_k);
  EXPECT_EQ(values(b.context_lens), want.context_lens);
  EXPECT_EQ(values(b.kv_block_counts), want.kv_block_counts);
  EXPECT_EQ(values(b.token_request), want.token_request);
  EXPECT_EQ(values(b.token_position), want.token_position);
  EXPECT_EQ(values(b.slot_mapping), want.slot_mapping);
  if (!in.index_block_table.empty()) {
    EXPECT_EQ(values(b.index_slot_mapping), want.index_slot_mapping);
  }
  EXPECT_EQ(values(b.totals), want.totals);
  EXPECT_EQ(b.error_flags.get_flat(0), 0.0);
}

// The oracle comparison on the test device; on CUDA also bitwise equality with the CPU backend.
void check_case(const oracle::MetadataInput& in) {
  MetadataBuffers dev = run_case(in, test_device());
  expect_matches_oracle(in, dev);
  if (test_device().is_cuda()) {
    MetadataBuffers cpu = run_case(in, Device::cpu());
    std::vector<TestTensor*> d = dev.outputs(), c = cpu.outputs();
    for (size_t i = 0; i < d.size(); ++i) {
      if (d[i] == &dev.index_slot_mapping && in.index_block_table.empty()) continue;
      EXPECT_EQ(d[i]->host_bytes(), c[i]->host_bytes()) << "output " << i;
    }
  }
}

// A batch of nd decode requests (query length L, or padded when seq_len is 0) followed by
// prefills, over shuffled pages; unused table entries hold garbage the op must not read.
oracle::MetadataInput make_input(int64_t nd, int64_t L, const std::vector<int64_t>& query_lens,
                                 const std::vector<int64_t>& seq_lens, int64_t extra_capacity,
                                 bool with_index, uint64_t seed) {
  std::mt19937_64 rng(seed);
  oracle::MetadataInput in;
  in.num_decode_requests = nd;
  in.decode_query_len = L;
  in.block_size = 128;
  in.query_lens = query_lens;
  in.seq_lens = seq_lens;
  int64_t used = 0, tokens = 0, max_used = 0;
  for (size_t b = 0; b < seq_lens.size(); ++b) {
    const int64_t blocks = ceil_div(seq_lens[b], in.block_size);
    used += blocks;
    max_used = std::max(max_used, blocks);
    tokens += static_cast<int64_t>(b) < nd ? L : query_lens[b];
  }
  in.max_blocks = max_used + 2;
  in.block_table = shuffled_block_table(seq_lens, in.max_blocks, used + 5, in.block_size, rng,
                                        /*filler=*/-7);
  if (with_index) {
    in.index_max_blocks = max_used + 1;
    in.index_block_table = shuffled_block_table(seq_lens, in.index_max_blocks, used + 40,
                                                in.block_size, rng, /*filler=*/1 << 30);
  }
  in.token_capacity = tokens + extra_capacity;
  return in;
}

TEST(BatchMetadata, DecodeOnlySingleToken) {
  MSA_REQUIRE_TEST_DEVICE();
  check_case(make_input(5, 1, {1, 1, 1, 1, 1}, {1, 127, 128, 129, 5000}, 0, false, 1));
}

TEST(BatchMetadata, DecodeSpeculativeWithPaddedRequests) {
  MSA_REQUIRE_TEST_DEVICE();
  // Requests 1 and 4 are padded (query 0, seq 0): 4 rows each at positions -4..-1, slot -1.
  check_case(make_input(6, 4, {4, 0, 4, 4, 0, 4}, {4, 0, 130, 256, 0, 1031}, 0, true, 2));
}

TEST(BatchMetadata, PrefillOnly) {
  MSA_REQUIRE_TEST_DEVICE();
  // Fresh prompts and prompts extending a cached prefix (seq_len > query_len).
  check_case(make_input(0, 1, {1, 300, 128, 77}, {1, 300, 1000, 77 + 128}, 0, true, 3));
}

TEST(BatchMetadata, MixedDecodeAndPrefillWithSpareCapacity) {
  MSA_REQUIRE_TEST_DEVICE();
  // Outputs sized 37 rows beyond the batch: the tail rows must read request/position/slot -1.
  check_case(make_input(3, 2, {2, 0, 2, 5, 129, 1}, {9, 0, 200, 5, 300, 64}, 37, true, 4));
}

TEST(BatchMetadata, TotalKvBlocksCountsPrefillsOnly) {
  MSA_REQUIRE_TEST_DEVICE();
  // Spec B6: total_kv_blocks sizes the prefill-side structures, so the decode requests' 3 + 2
  // blocks are not in it; the prefills hold 1 + 3.
  const oracle::MetadataInput in =
      make_input(2, 1, {1, 1, 5, 260}, {300, 129, 5, 260}, 0, false, 6);
  MetadataBuffers b = run_case(in, test_device());
  EXPECT_EQ(values(b.totals), (std::vector<int64_t>{2, 265, 267, 4}));
  expect_matches_oracle(in, b);
}

TEST(BatchMetadata, EmptyBatchFillsPadding) {
  MSA_REQUIRE_TEST_DEVICE();
  check_case(make_input(0, 1, {}, {}, 10, false, 5));
}

TEST(BatchMetadata, ManyRequestsAcrossThreadCounts) {
  MSA_REQUIRE_TEST_DEVICE();
  std::mt19937_64 rng(6);
  std::vector<int64_t> q, s;
  const int64_t nd = 40, L = 3;
  for (int64_t b = 0; b < 100; ++b) {
    if (b < nd && b % 7 == 3) {
      q.push_back(0);
      s.push_back(0);
    } else if (b < nd) {
      q.push_back(L);
      s.push_back(L + static_cast<int64_t>(rng() % 3000));
    } else {
      q.push_back(1 + static_cast<int64_t>(rng() % 400));
      s.push_back(q.back() + static_cast<int64_t>(rng() % 2000));
    }
  }
  const oracle::MetadataInput in = make_input(nd, L, q, s, 100, true, 7);
  check_case(in);
  // The CPU backend writes the same bytes for any thread count.
  MetadataBuffers one = run_case(in, Device::cpu(), 1);
  for (int threads : {2, 3, 8, 64}) {
    MetadataBuffers many = run_case(in, Device::cpu(), threads);
    std::vector<TestTensor*> a = one.outputs(), b = many.outputs();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i]->host_bytes(), b[i]->host_bytes()) << "threads " << threads;
    }
  }
}

TEST(BatchMetadata, StridedBlockTable) {
  MSA_REQUIRE_TEST_DEVICE();
  // The block table is a column window of a wider engine buffer (row stride 16, columns 4),
  // starting at column 3.
  const Device device = test_device();
  oracle::MetadataInput in = make_input(1, 1, {1, 10}, {300, 10}, 0, false, 8);
  TestTensor wide(DType::kI32, {2, 16}, device);
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < 16; ++c) wide.set({r, c}, -3);
    for (int64_t c = 0; c < in.max_blocks; ++c)
      wide.set({r, 3 + c}, in.block_table[r * in.max_blocks + c]);
  }
  wide.upload();
  MetadataBuffers b = make_buffers(in, device);
  for (TestTensor* t : b.outputs()) t->poison_device();
  BatchMetadataArgs args = make_args(in, b);
  args.block_table = wide.view().slice(1, 3, in.max_blocks);
  ASSERT_TRUE(run_metadata(args, device).ok());
  for (TestTensor* t : b.outputs()) t->download();
  b.error_flags.download();
  expect_matches_oracle(in, b);
}

TEST(BatchMetadata, EveryOutputIsOptional) {
  MSA_REQUIRE_TEST_DEVICE();
  const Device device = test_device();
  const oracle::MetadataInput in = make_input(2, 1, {1, 1, 3}, {5, 9, 3}, 0, false, 9);
  const oracle::MetadataOutput want = oracle::batch_metadata(in);
  MetadataBuffers b = make_buffers(in, device);
  BatchMetadataArgs bare;
  bare.num_decode_requests = 2;
  bare.query_lens = b.query_lens.view();
  bare.seq_lens = b.seq_lens.view();
  EXPECT_TRUE(run_metadata(bare, device).ok());
  // One output at a time: only it is written.
  BatchMetadataArgs only_totals = bare;
  b.totals.poison_device();
  only_totals.totals = b.totals.view();
  ASSERT_TRUE(run_metadata(only_totals, device).ok());
  b.totals.download();
  EXPECT_EQ(values(b.totals), want.totals);
  BatchMetadataArgs only_positions = bare;
  b.token_position.poison_device();
  only_positions.token_position = b.token_position.view();
  ASSERT_TRUE(run_metadata(only_positions, device).ok());
  b.token_position.download();
  EXPECT_EQ(values(b.token_position), want.token_position);
}

// Fills every output with a byte pattern (host mirror and device).
void fill_pattern(MetadataBuffers& b) {
  for (TestTensor* t : b.outputs()) {
    t->fill_bytes(0x5A);
    t->upload();
  }
}

// Every output still holds the pattern of fill_pattern().
void expect_unchanged(MetadataBuffers& b, const std::string& what) {
  for (TestTensor* t : b.outputs()) {
    const std::vector<uint8_t> pattern = t->host_bytes();
    t->download();
    EXPECT_EQ(t->host_bytes(), pattern) << what;
  }
}

// Bad arguments: the exact status, and no output touched.
void expect_rejected(const BatchMetadataArgs& args, MetadataBuffers& b, StatusCode code,
                     const char* what) {
  fill_pattern(b);
  const Status s = run_metadata(args, test_device());
  EXPECT_EQ(s.code(), code) << what << ": " << s.to_string();
  expect_unchanged(b, what);
}

TEST(BatchMetadata, RejectsBadArguments) {
  MSA_REQUIRE_TEST_DEVICE();
  const Device device = test_device();
  const oracle::MetadataInput in = make_input(2, 2, {2, 2, 5}, {10, 300, 5}, 3, true, 10);
  MetadataBuffers b = make_buffers(in, device);
  const BatchMetadataArgs good = make_args(in, b);
  TestTensor wrong_i64(DType::kI64, {3}, device);
  TestTensor wrong_i32_long(DType::kI32, {7}, device);
  TestTensor wrong_i32_2d(DType::kI32, {3, 1}, device);
  TestTensor table_rows(DType::kI32, {2, in.max_blocks}, device);
  TestTensor flags2(DType::kI32, {2}, device);
  const StatusCode bad = StatusCode::kInvalidArgument;

  auto with = [&](auto mutate, const char* what) {
    BatchMetadataArgs a = good;
    mutate(a);
    expect_rejected(a, b, bad, what);
  };
  with([&](BatchMetadataArgs& a) { a.query_lens = wrong_i64.view(); }, "query_lens dtype");
  with([&](BatchMetadataArgs& a) { a.query_lens = wrong_i32_2d.view(); }, "query_lens rank");
  with([&](BatchMetadataArgs& a) { a.query_lens = TensorView(); }, "query_lens missing");
  with([&](BatchMetadataArgs& a) { a.seq_lens = wrong_i64.view(); }, "seq_lens dtype");
  with([&](BatchMetadataArgs& a) { a.seq_lens = wrong_i32_long.view(); }, "seq_lens length");
  with([&](BatchMetadataArgs& a) { a.seq_lens = TensorView(); }, "seq_lens missing");
  with([&](BatchMetadataArgs& a) { a.block_table = table_rows.view(); }, "block_table rows");
  with([&](BatchMetadataArgs& a) { a.block_table = wrong_i64.view(); }, "block_table rank");
  with([&](BatchMetadataArgs& a) { a.block_table = TensorView(); }, "block_table missing");
  with([&](BatchMetadataArgs& a) { a.index_block_table = TensorView(); },
       "index_block_table missing");
  with([&](BatchMetadataArgs& a) { a.index_block_table = table_rows.view(); },
       "index_block_table rows");
  with([&](BatchMetadataArgs& a) { a.query_start_loc = wrong_i32_long.view(); },
       "query_start_loc length");
  with([&](BatchMetadataArgs& a) { a.prefill_cu_seqlens_q = wrong_i32_long.view(); },
       "prefill_cu_seqlens_q length");
  with([&](BatchMetadataArgs& a) { a.prefill_cu_seqlens_k = wrong_i64.view(); },
       "prefill_cu_seqlens_k dtype");
  with([&](BatchMetadataArgs& a) { a.context_lens = wrong_i64.view(); }, "context_lens dtype");
  with([&](BatchMetadataArgs& a) { a.kv_block_counts = wrong_i32_long.view(); },
       "kv_block_counts length");
  with([&](BatchMetadataArgs& a) { a.token_request = wrong_i64.view(); }, "token_request dtype");
  with([&](BatchMetadataArgs& a) { a.token_position = wrong_i32_2d.view(); },
       "token_position rank");
  with([&](BatchMetadataArgs& a) { a.slot_mapping = wrong_i32_long.view(); }, "slot_mapping dtype");
  with([&](BatchMetadataArgs& a) { a.index_slot_mapping = wrong_i32_long.view(); },
       "index_slot_mapping dtype");
  with([&](BatchMetadataArgs& a) { a.totals = wrong_i32_long.view(); }, "totals length");
  with([&](BatchMetadataArgs& a) { a.error_flags = flags2.view(); }, "error_flags length");
  with([&](BatchMetadataArgs& a) { a.decode_query_len = 0; }, "decode_query_len 0");
  with([&](BatchMetadataArgs& a) { a.decode_query_len = 9; }, "decode_query_len 9");
  with([&](BatchMetadataArgs& a) { a.num_decode_requests = 4; }, "num_decode_requests > B");
  with([&](BatchMetadataArgs& a) { a.num_decode_requests = -1; }, "num_decode_requests < 0");
  with([&](BatchMetadataArgs& a) { a.block_size = 0; }, "block_size 0");
  with(
      [&](BatchMetadataArgs& a) {
        a.seq_lens.device = device.is_cpu() ? Device::cuda(0) : Device::cpu();
      },
      "seq_lens on another device");

  size_t bytes = 0;
  ASSERT_TRUE(workspace_size(good, &bytes).ok());
  if (bytes > 0) {
    fill_pattern(b);
    EXPECT_EQ(run(good, Workspace{}, Stream{}).code(), StatusCode::kWorkspaceTooSmall);
    expect_unchanged(b, "workspace too small");
  }
}

// Bad values inside tensors: on the CPU kOutOfRange naming the value, the flag bit, nothing
// written; on CUDA the kernel cannot return a status, so the flag bit is the signal.
void expect_bad_value(const oracle::MetadataInput& in, DeviceError bit, const std::string& names,
                      bool shrink_capacity = false) {
  const Device device = test_device();
  MetadataBuffers b = make_buffers(in, device);
  BatchMetadataArgs args = make_args(in, b);
  if (shrink_capacity) args.slot_mapping = b.slot_mapping.view().slice(0, 0, 2);
  fill_pattern(b);
  const Status s = run_metadata(args, device);
  b.error_flags.download();
  EXPECT_NE(static_cast<int32_t>(b.error_flags.get_flat(0)) & bit, 0) << names;
  if (device.is_cuda()) return;
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
  EXPECT_NE(s.message().find(names), std::string::npos) << s.message();
  expect_unchanged(b, names);
}

TEST(BatchMetadata, RejectsBadDeviceValues) {
  MSA_REQUIRE_TEST_DEVICE();
  const std::vector<int64_t> q = {2, 2, 5}, s = {10, 300, 5};
  auto base = [&] { return make_input(2, 2, q, s, 0, true, 11); };

  oracle::MetadataInput in = base();
  in.query_lens[1] = 1;  // decode request with a query length other than L
  expect_bad_value(in, kDeviceErrorQueryLen, "query_lens[1] = 1");

  in = base();
  in.query_lens[0] = 0;  // padded decode request must also have seq_len 0
  expect_bad_value(in, kDeviceErrorQueryLen, "query_lens[0] = 0");

  in = base();
  in.query_lens[2] = 0;  // prefill without tokens
  expect_bad_value(in, kDeviceErrorQueryLen, "query_lens[2] = 0");

  in = base();
  in.seq_lens[2] = 4;  // fewer keys than queries
  expect_bad_value(in, kDeviceErrorSeqLen, "seq_lens[2] = 4");

  in = base();
  in.seq_lens[1] = static_cast<int64_t>(in.max_blocks * in.block_size + 1);  // past the table
  expect_bad_value(in, kDeviceErrorSeqLen, "seq_lens[1]");

  in = base();
  in.block_table[1 * in.max_blocks + 2] = -5;  // third used page of request 1 (seq 300)
  expect_bad_value(in, kDeviceErrorBlockId, "block_table[1, 2] = -5");

  in = base();
  in.index_block_table[0] = -1;
  expect_bad_value(in, kDeviceErrorBlockId, "index_block_table[0, 0] = -1");

  in = base();  // 9 tokens; slot_mapping holds 2
  expect_bad_value(in, kDeviceErrorCapacity, "slot_mapping", /*shrink_capacity=*/true);
}

}  // namespace
}  // namespace test
}  // namespace msa
