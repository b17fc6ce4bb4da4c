// Output digests (engine/synth.h): what they distinguish, and (CUDA builds with a device) that
// the device fold gives the host functions' digests bit for bit.
#include "engine/synth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#if MSA_ENGINE_CUDA
#include <cuda_runtime_api.h>

#include "engine/synth_cuda.h"
#endif

namespace msa {
namespace engine {
namespace {

// Rows of exact, varied bits: a hash-driven spread of values, a NaN, an infinity and -0.
std::vector<float> test_rows(int64_t rows, int row_len) {
  std::vector<float> v(static_cast<size_t>(rows * row_len));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(synth::mix64(i + 1) % 2000003) * 1e-3f - 1000.0f;
  }
  v[1] = NAN;
  v[v.size() / 2] = INFINITY;
  v[v.size() - 1] = -0.0f;
  return v;
}

TEST(EngineDigests, SeeOrderSignAndEveryWord) {
  std::vector<float> row = test_rows(1, 100);
  const uint64_t base = synth::row_digest(row.data(), 100);
  std::vector<float> swapped = row;
  std::swap(swapped[3], swapped[35]);  // words of one strand
  EXPECT_NE(synth::row_digest(swapped.data(), 100), base);
  swapped = row;
  std::swap(swapped[3], swapped[4]);  // words of neighbouring strands
  EXPECT_NE(synth::row_digest(swapped.data(), 100), base);
  std::vector<float> zero(100, 0.0f), neg_zero(100, 0.0f);
  neg_zero[50] = -0.0f;
  EXPECT_NE(synth::row_digest(zero.data(), 100), synth::row_digest(neg_zero.data(), 100));
  for (int i = 0; i < 100; ++i) {
    if (std::isnan(row[static_cast<size_t>(i)])) continue;  // nextafter keeps a NaN
    std::vector<float> changed = row;
    changed[static_cast<size_t>(i)] = std::nextafter(row[static_cast<size_t>(i)], 2000.0f);
    EXPECT_NE(synth::row_digest(changed.data(), 100), base) << "word " << i;
  }
  EXPECT_NE(synth::row_digest(row.data(), 99), base);  // the length counts
}

#if MSA_ENGINE_CUDA
TEST(EngineDigests, DeviceFoldMatchesHost) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "no CUDA device";
  }
  const int64_t T = 37;
  const int layer = 3;
  for (const int row_len : {2048, 100, 7}) {
    const std::vector<float> rows = test_rows(T, row_len);
    std::vector<uint64_t> digests(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) digests[static_cast<size_t>(t)] = synth::mix64(t + 7);
    void* rows_mem = nullptr;
    void* digests_mem = nullptr;
    ASSERT_EQ(cudaMalloc(&rows_mem, rows.size() * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&digests_mem, digests.size() * sizeof(uint64_t)), cudaSuccess);
    auto* d_rows = static_cast<float*>(rows_mem);
    auto* d_digests = static_cast<uint64_t*>(digests_mem);
    ASSERT_EQ(cudaMemcpy(d_rows, rows.data(), rows.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_digests, digests.data(), digests.size() * sizeof(uint64_t),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_TRUE(launch_fold_digests(d_rows, T, row_len, layer, d_digests).ok());
    std::vector<uint64_t> got(digests.size());
    ASSERT_EQ(
        cudaMemcpy(got.data(), d_digests, got.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost),
        cudaSuccess);
    cudaFree(d_rows);
    cudaFree(d_digests);
    for (int64_t t = 0; t < T; ++t) {
      const uint64_t want =
          synth::fold_digest(digests[static_cast<size_t>(t)],
                             synth::row_digest(rows.data() + t * row_len, row_len), layer);
      EXPECT_EQ(got[static_cast<size_t>(t)], want) << "row " << t << ", length " << row_len;
    }
  }
}
#endif

}  // namespace
}  // namespace engine
}  // namespace msa
