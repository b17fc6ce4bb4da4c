// The softmax arithmetic of the sparse attention kernels, on mma.sync m16n8k16 accumulator tiles:
// lane 4g + c holds rows g (elements 0, 1) and g + 8 (elements 2, 3) of each 16 x 8 tile, so a
// row's values are spread over the four lanes of a quad. Logits are in the log2 domain (the
// softmax scale includes log2(e)), so every exponential is an exp2.
#pragma once

#include <cstdint>

namespace msa {
namespace cuda {

// The maximum (sum) of x over the quad of lanes that holds an accumulator row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xFFFFFFFFu, x, 1);
  return x + __shfl_xor_sync(0xFFFFFFFFu, x, 2);
}

// What a row's exponentials subtract: its maximum m, or 0 for a row without a visible key (m =
// -inf), which keeps exp2's arguments finite (every probability of the row is then 0).
__device__ __forceinline__ float exp2_base(float m) { return m == -INFINITY ? 0.0f : m; }

// P = 2^(s - base) in place for accumulator tiles s, and this lane's share of each row's sum.
template <int kTiles>
__device__ __forceinline__ void exp2_rows(float (&s)[kTiles][4], const float (&base)[2],
                                          float (&rowsum)[2]) {
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = exp2f(s[nt][e] - base[e >> 1]);
      rowsum[e >> 1] += s[nt][e];
    }
  }
}

// One step of the online softmax of accumulator rows g and g + 8 over a sequence of key tiles,
// whose running maxima are m and this lane's shares of the running sums l: folds in a tile of
// masked logits s (-inf for keys a row does not see) whose maxima over this lane's elements are
// mx. s becomes the probabilities relative to the new maxima, and alpha the factor that rescales
// what was accumulated relative to the old ones (exactly 1 for a row whose maximum did not grow).
// (Separate arrays rather than one state struct: the struct changed the attention kernel's
// machine code.)
template <int kTiles>
__device__ __forceinline__ void online_softmax_update(float (&m)[2], float (&l)[2],
                                                      float (&s)[kTiles][4], float (&mx)[2],
                                                      float (&alpha)[2]) {
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = quad_max(mx[r]);
    const float m_new = fmaxf(m[r], mx[r]);
    base[r] = exp2_base(m_new);
    alpha[r] = exp2f(m[r] - base[r]);
    m[r] = m_new;
  }
  float rowsum[2] = {0.0f, 0.0f};
  exp2_rows(s, base, rowsum);
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + rowsum[r];
}

// The merge of kStates softmax states (m[i][row], l[i][row]) of one row, in ascending i: sets
// m_all to their maximum and base to its exp2_base, and returns the merged sum, the sum of
// l_i 2^(m_i - base).
template <int kStates, int kRows>
__device__ __forceinline__ float merge_states(const float (&m)[kStates][kRows],
                                              const float (&l)[kStates][kRows], int row,
                                              float& m_all, float& base) {
  m_all = -INFINITY;
  for (int w = 0; w < kStates; ++w) m_all = fmaxf(m_all, m[w][row]);
  base = exp2_base(m_all);
  float l_all = 0.0f;
  for (int w = 0; w < kStates; ++w) l_all += l[w][row] * exp2f(m[w][row] - base);
  return l_all;
}

}  // namespace cuda
}  // namespace msa
