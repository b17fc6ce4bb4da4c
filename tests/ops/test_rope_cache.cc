// RoPE table builder (spec A11) against the float64 oracle on the binary's test device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/test_tensor.h"
#include "msa/fused_qknorm_rope.h"
#include "oracle/fused_oracle.h"

namespace msa {
namespace test {
namespace {

int64_t float_ordinal(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? -int64_t{u & 0x7FFFFFFFu} : int64_t{u};
}

Status build_table(const TestTensor& table, double theta, int threads) {
  RopeCacheArgs args;
  args.theta = theta;
  args.cos_sin_out = table.view();
  size_t bytes = 0;
  const Status ws = workspace_size(args, &bytes);
  if (!ws.ok()) return ws;
  TestTensor workspace(DType::kE4M3, {static_cast<int64_t>(bytes)}, table.device());
  return run(args, Workspace{bytes ? workspace.view().data : nullptr, bytes},
             Stream{nullptr, threads});
}

// Checks rows [begin, end) (every `step`-th) of a downloaded table against float(oracle).
// The CPU computes the same fp64 cos/sin and rounds once, so it must match exactly; CUDA's fp64
// pow/cos/sin may differ from the host libm by an fp64 ulp, which can move the fp32 rounding at
// a midpoint: allow 1 f32 ulp there.
void expect_rows_match(const TestTensor& table, double theta, int64_t begin, int64_t end,
                       int64_t step) {
  const int rotary_dim = static_cast<int>(table.shape()[1]);
  const int64_t max_ulps = test_device().is_cpu() ? 0 : 1;
  int failures = 0;
  for (int64_t p = begin; p < end; p += step) {
    const std::vector<double> want = oracle::rope_row(theta, rotary_dim, p);
    for (int i = 0; i < rotary_dim; ++i) {
      const float got = static_cast<float>(table.get({p, i}));
      const float ref = static_cast<float>(want[static_cast<size_t>(i)]);
      if (std::llabs(float_ordinal(got) - float_ordinal(ref)) > max_ulps && ++failures <= 8) {
        ADD_FAILURE() << "row " << p << " column " << i << ": got " << got << ", want " << ref;
      }
    }
  }
}

TEST(RopeCache, MatchesFloat64Oracle) {
  MSA_REQUIRE_TEST_DEVICE();
  for (int rotary_dim : {64, 128, 2}) {
    SCOPED_TRACE("rotary_dim " + std::to_string(rotary_dim));
    TestTensor table(DType::kF32, {4096, rotary_dim}, test_device());
    table.poison_device();
    ASSERT_TRUE(build_table(table, 5e6, 0).ok());
    table.download();
    expect_rows_match(table, 5e6, 0, 4096, 1);
  }
}

TEST(RopeCache, OtherTheta) {
  MSA_REQUIRE_TEST_DEVICE();
  TestTensor table(DType::kF32, {300, 32}, test_device());
  table.poison_device();
  ASSERT_TRUE(build_table(table, 10000.0, 0).ok());
  table.download();
  expect_rows_match(table, 10000.0, 0, 300, 1);
}

TEST(RopeCache, PositionsUpToOneMillion) {
  MSA_REQUIRE_TEST_DEVICE();
  // rotary_dim 4 keeps the [1000001, 4] table at 16 MB.
  const int64_t rows = 1000001;
  TestTensor table(DType::kF32, {rows, 4}, test_device());
  table.poison_device();
  ASSERT_TRUE(build_table(table, 5e6, 0).ok());
  table.download();
  expect_rows_match(table, 5e6, 0, rows, 997);
  expect_rows_match(table, 5e6, rows - 2000, rows, 1);
}

TEST(RopeCache, StridedRowsAndThreadCounts) {
  MSA_REQUIRE_TEST_DEVICE();
  // Rows 40 floats apart: the 8 padding floats of each row must stay untouched.
  const int64_t rows = 257;
  TestTensor table(DType::kF32, {rows, 32}, {40, 1}, rows * 40, test_device());
  table.poison_device();
  ASSERT_TRUE(build_table(table, 5e6, 1).ok());
  table.download();
  expect_rows_match(table, 5e6, 0, rows, 1);
  const std::vector<uint8_t>& bytes = table.host_bytes();
  for (int64_t p = 0; p + 1 < rows; ++p) {
    for (int64_t k = 32 * 4; k < 40 * 4; ++k) {
      ASSERT_EQ(bytes[static_cast<size_t>(p * 160 + k)], 0xFF) << "padding of row " << p;
    }
  }
  // Bitwise identical for any thread count (on CUDA: a repeated run).
  for (int threads : {2, 8}) {
    TestTensor again(DType::kF32, {rows, 32}, {40, 1}, rows * 40, test_device());
    again.poison_device();
    ASSERT_TRUE(build_table(again, 5e6, threads).ok());
    again.download();
    EXPECT_TRUE(again.host_bytes() == table.host_bytes()) << "cpu_threads " << threads;
  }
}

TEST(RopeCache, BadInputs) {
  MSA_REQUIRE_TEST_DEVICE();
  TestTensor table(DType::kF32, {16, 8}, test_device());
  table.poison_device();
  auto expect_invalid = [&](RopeCacheArgs args, const std::string& arg) {
    const Status s = run(args, Workspace{}, Stream{});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(arg + ":"), std::string::npos) << s.message();
    size_t bytes = 0;
    EXPECT_EQ(workspace_size(args, &bytes).code(), StatusCode::kInvalidArgument);
  };
  RopeCacheArgs good;
  good.cos_sin_out = table.view();
  RopeCacheArgs a = good;
  a.theta = 0.0;
  expect_invalid(a, "theta");
  a.theta = std::nan("");
  expect_invalid(a, "theta");
  a = good;
  a.cos_sin_out.shape[1] = 7;
  expect_invalid(a, "cos_sin_out");
  a = good;
  a.cos_sin_out.dtype = DType::kF16;
  expect_invalid(a, "cos_sin_out");
  a = good;
  a.cos_sin_out.ndim = 1;
  expect_invalid(a, "cos_sin_out");
  a = good;
  a.cos_sin_out = TensorView();
  expect_invalid(a, "cos_sin_out");
  table.download();
  for (uint8_t b : table.host_bytes()) ASSERT_EQ(b, 0xFF) << "output written by a bad call";
}

}  // namespace
}  // namespace test
}  // namespace msa
