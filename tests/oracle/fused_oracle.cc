#include "oracle/fused_oracle.h"

#include <cmath>

namespace msa {
namespace oracle {

std::vector<double> norm_rope(const std::vector<double>& x, const std::vector<double>& w,
                              double eps, int rotary_dim, const std::vector<double>& cos_sin) {
  const size_t n = x.size();
  double sum_sq = 0.0;
  for (double v : x) sum_sq += v * v;
  const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  std::vector<double> y(n);
  for (size_t i = 0; i < n; ++i) y[i] = x[i] * inv_rms * (1.0 + w[i]);
  std::vector<double> out = y;
  const size_t half = static_cast<size_t>(rotary_dim / 2);
  for (size_t i = 0; i < half; ++i) {
    const double c = cos_sin[i], s = cos_sin[half + i];
    out[i] = y[i] * c - y[half + i] * s;
    out[half + i] = y[half + i] * c + y[i] * s;
  }
  return out;
}

namespace {

std::vector<double> segment(const std::vector<double>& row, int64_t begin, int64_t len) {
  return std::vector<double>(row.begin() + begin, row.begin() + begin + len);
}

}  // namespace

FusedTokenResult fused_token(const FusedShape& s, const std::vector<double>& row,
                             const std::vector<double>& cos_sin, const std::vector<double>& q_w,
                             const std::vector<double>& k_w, const std::vector<double>& iq_w,
                             const std::vector<double>& ik_w, bool with_index) {
  FusedTokenResult r;
  const int64_t d = s.head_dim, di = s.index_dim;
  int64_t at = 0;
  for (int h = 0; h < s.num_q_heads; ++h, at += d) {
    r.q.push_back(norm_rope(segment(row, at, d), q_w, s.eps, s.rotary_dim, cos_sin));
  }
  for (int h = 0; h < s.num_kv_heads; ++h, at += d) {
    r.k.push_back(norm_rope(segment(row, at, d), k_w, s.eps, s.rotary_dim, cos_sin));
  }
  for (int h = 0; h < s.num_kv_heads; ++h, at += d) r.v.push_back(segment(row, at, d));
  if (!with_index) return r;
  for (int h = 0; h < s.num_index_heads; ++h, at += di) {
    r.index_q.push_back(norm_rope(segment(row, at, di), iq_w, s.eps, s.rotary_dim, cos_sin));
  }
  r.index_k = norm_rope(segment(row, at, di), ik_w, s.eps, s.rotary_dim, cos_sin);
  return r;
}

std::vector<double> rope_row(double theta, int rotary_dim, int64_t position) {
  const int half = rotary_dim / 2;
  std::vector<double> row(static_cast<size_t>(rotary_dim));
  for (int i = 0; i < half; ++i) {
    const double f = std::pow(theta, -2.0 * i / rotary_dim);
    row[static_cast<size_t>(i)] = std::cos(static_cast<double>(position) * f);
    row[static_cast<size_t>(half + i)] = std::sin(static_cast<double>(position) * f);
  }
  return row;
}

}  // namespace oracle
}  // namespace msa
