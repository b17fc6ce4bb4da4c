// Float64 oracle of the fused pre-attention math (spec A11, B5, B2.1) and of the RoPE table,
// written from the spec independently of src/. Inputs are the exact values of the stored
// (low-precision) operands; outputs are unrounded float64 values.
#pragma once

#include <cstdint>
#include <vector>

namespace msa {
namespace oracle {

// RoPE_p(GemmaNorm(x; w)) of one head: y = x / sqrt(mean(x^2) + eps) * (1 + w), then the pairs
// (i, i + rotary_dim/2), i < rotary_dim/2, rotated by the angle whose cosine is cos_sin[i] and
// sine cos_sin[rotary_dim/2 + i] (one row of the table); dims >= rotary_dim pass through.
std::vector<double> norm_rope(const std::vector<double>& x, const std::vector<double>& w,
                              double eps, int rotary_dim, const std::vector<double>& cos_sin);

// The per-token results of the fused op for one token row of qkv (width checked by the caller).
struct FusedTokenResult {
  std::vector<std::vector<double>> q;        // [nq][D]
  std::vector<std::vector<double>> k;        // [nkv][D] (normed, roped)
  std::vector<std::vector<double>> v;        // [nkv][D] (raw)
  std::vector<std::vector<double>> index_q;  // [niq][Di], empty unless with_index
  std::vector<double> index_k;               // [Di], empty unless with_index
};

struct FusedShape {
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int num_index_heads = 0;
  int head_dim = 0;
  int index_dim = 0;
  int rotary_dim = 0;
  double eps = 1e-6;
};

// Splits `row` ([q | k | v | index_q | index_k]) and applies norm_rope per head; the index
// branch only when `with_index`.
FusedTokenResult fused_token(const FusedShape& s, const std::vector<double>& row,
                             const std::vector<double>& cos_sin, const std::vector<double>& q_w,
                             const std::vector<double>& k_w, const std::vector<double>& iq_w,
                             const std::vector<double>& ik_w, bool with_index);

// Row p of the table: [cos(p f_i) for i < r/2, sin(p f_i) for i < r/2], f_i = theta^(-2i/r).
std::vector<double> rope_row(double theta, int rotary_dim, int64_t position);

}  // namespace oracle
}  // namespace msa
