// The test tensors' whole-tensor walks (values, generate) against their per-element flat
// accessors, on strided layouts with padding: the op tests build their inputs and the oracles'
// copies with them.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/test_tensor.h"

namespace msa {
namespace test {
namespace {

// [3, 4, 5] over rows of 7 elements and 30-element blocks: every dimension strided, with gaps.
TestTensor padded_tensor(DType dtype) {
  return TestTensor(dtype, {3, 4, 5}, {30, 7, 1}, 90, Device::cpu());
}

TEST(TestTensor, ValuesFollowTheFlatOrder) {
  TestTensor t = padded_tensor(DType::kF32);
  t.fill_bytes(0xFF);  // gaps hold NaN; values() must not read them
  for (int64_t i = 0; i < t.numel(); ++i) t.set_flat(i, static_cast<double>(i));
  const std::vector<double> v = t.values();
  ASSERT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(v[i], t.get_flat(i)) << i;
  EXPECT_EQ(v[5 * 4 + 5 + 2], t.get({1, 1, 2}));
}

TEST(TestTensor, GenerateSetsTheFlatOrderAndRounds) {
  TestTensor t = padded_tensor(DType::kBF16);
  TestTensor u = padded_tensor(DType::kBF16);
  t.fill_bytes(0);
  u.fill_bytes(0);
  int64_t next = 0;
  t.generate([&] { return 1.0 + static_cast<double>(next++) / 3.0; });
  EXPECT_EQ(next, t.numel());
  for (int64_t i = 0; i < u.numel(); ++i) u.set_flat(i, 1.0 + static_cast<double>(i) / 3.0);
  EXPECT_EQ(t.host_bytes(), u.host_bytes());  // same elements, same rounding, gaps untouched
}

TEST(TestTensor, EmptyAndScalarShapes) {
  TestTensor empty(DType::kF32, {2, 0, 3}, Device::cpu());
  int calls = 0;
  empty.generate([&] {
    ++calls;
    return 1.0;
  });
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(empty.values().empty());
  TestTensor scalar(DType::kI32, {}, Device::cpu());
  scalar.generate([] { return 7.0; });
  EXPECT_EQ(scalar.values(), std::vector<double>{7.0});
}

}  // namespace
}  // namespace test
}  // namespace msa
