// Synthetic activations. There are no weights, so every input a layer needs (the fused
// [q | k | v | index_q | index_k] row) is a pure function of (seed, request, position, layer),
// computed with a counter-based hash: a recomputed token (after preemption) produces the same
// bits, whatever the batch around it. The values carry structure so that the indexer's choice
// matters: every block of a request has a random "topic" direction that its keys and index keys
// lean towards, and a query leans towards the topics of a few earlier "focus" blocks.
//
// Host and device share these inline functions (the CUDA synthesis kernel includes this header).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MSA_ENGINE_HD __host__ __device__ __forceinline__
#else
#define MSA_ENGINE_HD inline
#endif

namespace msa {
namespace engine {
namespace synth {

// Mixing weights: a row element is kLean * direction + kNoise * noise, both unit variance per
// dimension, so rows stay O(1) before the RMS norm.
constexpr float kLean = 0.8f;
constexpr float kNoise = 0.6f;
// How many earlier blocks a query focuses on, and over how many consecutive positions a
// choice of focus blocks holds (neighbouring queries share interests, as in real text).
constexpr int kFocusBlocks = 3;
constexpr int kFocusSpan = 32;

// Stream tags that keep the hash inputs of different quantities apart.
enum Tag : uint64_t {
  kTagTopic = 1,
  kTagFocus = 2,
  kTagNoise = 3,
  kTagAccept = 4,
  kTagWeight = 5,
  kTagSample = 6,
};

// splitmix64 finaliser: a bijective 64-bit mix with good avalanche.
MSA_ENGINE_HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

MSA_ENGINE_HD uint64_t hash(uint64_t seed, uint64_t tag, uint64_t a, uint64_t b = 0,
                            uint64_t c = 0) {
  uint64_t h = mix64(seed ^ (tag * 0xD6E8FEB86659FD93ull));
  h = mix64(h ^ a);
  h = mix64(h ^ b);
  return mix64(h ^ c);
}

// Uniform in [0, 1) from the top 24 bits.
MSA_ENGINE_HD float unit_uniform(uint64_t h) {
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

// Uniform with zero mean and unit variance: [-sqrt(3), sqrt(3)).
MSA_ENGINE_HD float unit_noise(uint64_t h) { return (unit_uniform(h) * 2.0f - 1.0f) * 1.7320508f; }

// Component `dim` of the topic direction of block `block` of a request (layer independent, so
// every layer agrees on which blocks matter, which is what makes top-k reuse reasonable).
MSA_ENGINE_HD float topic(uint64_t seed, uint64_t request, int64_t block, int dim) {
  return unit_noise(
      hash(seed, kTagTopic, request, static_cast<uint64_t>(block), static_cast<uint64_t>(dim)));
}

// The i-th focus block of a query at `position`: one of the visible blocks [0, own block].
MSA_ENGINE_HD int64_t focus_block(uint64_t seed, uint64_t request, int64_t position, int i,
                                  int block_size) {
  const int64_t visible = position / block_size + 1;
  const uint64_t h = hash(seed, kTagFocus, request, static_cast<uint64_t>(position / kFocusSpan),
                          static_cast<uint64_t>(i));
  return static_cast<int64_t>(h % static_cast<uint64_t>(visible));
}

// Component `dim` of a query's direction: the normalised sum of the topics of its focus blocks
// (focus[i] = focus_block(..., i, ...), hoisted out of the per-dimension loop by callers).
MSA_ENGINE_HD float query_direction(uint64_t seed, uint64_t request, const int64_t* focus,
                                    int dim) {
  float sum = 0.0f;
  for (int i = 0; i < kFocusBlocks; ++i) sum += topic(seed, request, focus[i], dim);
  return sum * 0.57735027f;  // 1 / sqrt(kFocusBlocks)
}

// Shape of the fused row: [q (nq*D) | k (nkv*D) | v (nkv*D) | index_q (niq*Di) | index_k (Di)].
struct RowShape {
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int num_index_heads = 0;
  int head_dim = 0;
  int index_dim = 0;
  int block_size = 128;

  // Fits an int: rank_shape rejects ranks whose fused row does not.
  MSA_ENGINE_HD int width() const {
    return (num_q_heads + 2 * num_kv_heads) * head_dim + (num_index_heads + 1) * index_dim;
  }
};

// Hash key of the row of (request, position, layer); elements derive from it by column.
MSA_ENGINE_HD uint64_t row_key(uint64_t seed, uint64_t request, int64_t position, int layer) {
  return hash(seed, kTagNoise, request, static_cast<uint64_t>(position),
              static_cast<uint64_t>(layer));
}

// Element `col` of a row, given the row's key and the token's query direction `qdir` and key
// direction `kdir` at that element's dimension (precomputed per token, since they do not depend
// on the layer or the head).
MSA_ENGINE_HD float row_element(uint64_t key, const RowShape& s, int col, float qdir, float kdir) {
  const float noise = unit_noise(mix64(key + static_cast<uint64_t>(col) * 0x9E3779B97F4A7C15ull));
  const int q_end = s.num_q_heads * s.head_dim;
  const int k_end = q_end + s.num_kv_heads * s.head_dim;
  const int v_end = k_end + s.num_kv_heads * s.head_dim;
  const int iq_end = v_end + s.num_index_heads * s.index_dim;
  if (col < q_end || (col >= v_end && col < iq_end)) return kLean * qdir + kNoise * noise;
  if (col < k_end || col >= iq_end) return kLean * kdir + kNoise * noise;
  return noise;  // values carry no structure
}

// Dimension of the direction vectors an element of column `col` uses.
MSA_ENGINE_HD int row_element_dim(const RowShape& s, int col) {
  const int v_end = (s.num_q_heads + 2 * s.num_kv_heads) * s.head_dim;
  return col < v_end ? col % s.head_dim : (col - v_end) % s.index_dim;
}

MSA_ENGINE_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

// Order-sensitive 64-bit digest of a row of floats (their exact bits): FNV-1a over each of
// kDigestLanes interleaved strands (strand j: words j, j + kDigestLanes, ...), then FNV-1a over
// the strands' hashes in strand order, then a full mix. Strands, not one chain over the row, so
// that a warp's lanes hash a row together with coalesced loads (one chain of a 64-bit multiply
// per word made the device's digests the longest stage of a CUDA run).
constexpr int kDigestLanes = 32;
constexpr uint64_t kFnvBasis = 0xCBF29CE484222325ull, kFnvPrime = 0x100000001B3ull;

// The FNV-1a hash of strand j of a row of n floats.
MSA_ENGINE_HD uint64_t row_strand_digest(const float* row, int n, int j) {
  uint64_t h = kFnvBasis;
  for (int i = j; i < n; i += kDigestLanes) h = (h ^ float_bits(row[i])) * kFnvPrime;
  return h;
}

// The row digest from its strands' hashes (strand[0 .. kDigestLanes)).
MSA_ENGINE_HD uint64_t combine_strand_digests(const uint64_t* strand) {
  uint64_t h = kFnvBasis;
  for (int j = 0; j < kDigestLanes; ++j) h = (h ^ strand[j]) * kFnvPrime;
  return mix64(h);
}

MSA_ENGINE_HD uint64_t row_digest(const float* row, int n) {
  uint64_t strand[kDigestLanes];
  for (int j = 0; j < kDigestLanes; ++j) strand[j] = row_strand_digest(row, n, j);
  return combine_strand_digests(strand);
}

// Folds one layer's row digest into a token's running digest.
MSA_ENGINE_HD uint64_t fold_digest(uint64_t running, uint64_t layer_digest, int layer) {
  return mix64(running ^ mix64(layer_digest + static_cast<uint64_t>(layer)));
}

}  // namespace synth
}  // namespace engine
}  // namespace msa
