// Test helpers for paged batches: shuffled, non-contiguous block tables and per-row positions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace msa {
namespace test {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A block table [num_requests, max_blocks] (row-major) whose used entries (the first
// ceil(seq_len / block_size) of each row) are distinct pages drawn in shuffled order from
// [0, num_blocks); unused entries hold `filler` (engines leave stale values there).
// num_blocks must be at least the total number of used blocks.
inline std::vector<int32_t> shuffled_block_table(const std::vector<int64_t>& seq_lens,
                                                 int64_t max_blocks, int64_t num_blocks,
                                                 int64_t block_size, std::mt19937_64& rng,
                                                 int32_t filler = 0) {
  std::vector<int32_t> pages(static_cast<size_t>(num_blocks));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int32_t> table(seq_lens.size() * static_cast<size_t>(max_blocks), filler);
  size_t next = 0;
  for (size_t r = 0; r < seq_lens.size(); ++r) {
    const int64_t used = ceil_div(seq_lens[r], block_size);
    for (int64_t b = 0; b < used; ++b) table[r * max_blocks + b] = pages.at(next++);
  }
  return table;
}

// Absolute position of each row for decode batches (query_len rows per request) or prefill
// batches (cu_seqlens_q); negative for padded rows.
inline std::vector<int64_t> decode_positions(const std::vector<int64_t>& seq_lens,
                                             int64_t query_len) {
  std::vector<int64_t> pos;
  for (int64_t s : seq_lens)
    for (int64_t r = 0; r < query_len; ++r) pos.push_back(s - query_len + r);
  return pos;
}

inline std::vector<int64_t> prefill_positions(const std::vector<int64_t>& cu_seqlens_q,
                                              const std::vector<int64_t>& seq_lens,
                                              int64_t num_rows) {
  std::vector<int64_t> pos(static_cast<size_t>(num_rows), -1);
  for (size_t b = 0; b + 1 < cu_seqlens_q.size(); ++b) {
    const int64_t q = cu_seqlens_q[b + 1] - cu_seqlens_q[b];
    for (int64_t i = 0; i < q; ++i) pos[cu_seqlens_q[b] + i] = seq_lens[b] - q + i;
  }
  return pos;
}

}  // namespace test
}  // namespace msa
