#include "oracle/index_topk_oracle.h"

#include <algorithm>
#include <cmath>

namespace msa {
namespace oracle {

int index_block_tier(const IndexTopkInput& in, int64_t nvb, int64_t b) {
  if (b < in.init_blocks) return 2;
  if (b >= nvb - in.local_blocks) return 1;
  return 0;
}

std::vector<double> index_block_scores(const IndexTopkInput& in, int64_t t, int64_t h) {
  const int64_t p = in.row_position[t];
  if (p < 0) return {};
  const int64_t req = in.row_request[t];
  const int64_t nvb = p / in.block_size + 1;
  const double* q = &in.index_q[(t * in.num_heads + h) * in.head_dim];
  std::vector<double> scores(static_cast<size_t>(nvb), -INFINITY);
  for (int64_t j = 0; j <= p; ++j) {
    const int64_t b = j / in.block_size;
    const int64_t page = in.block_table[req * in.max_blocks + b];
    const double* k = &in.index_cache[(page * in.block_size + j % in.block_size) * in.head_dim];
    double s = 0.0;
    for (int64_t d = 0; d < in.head_dim; ++d) s += q[d] * k[d];
    if (std::isnan(s)) s = -1e30;
    scores[b] = std::max(scores[b], s);
  }
  return scores;
}

std::vector<int32_t> index_topk_row(const IndexTopkInput& in, int64_t t, int64_t h) {
  std::vector<int32_t> row(static_cast<size_t>(in.width), -1);
  const std::vector<double> scores = index_block_scores(in, t, h);
  const int64_t nvb = static_cast<int64_t>(scores.size());
  if (nvb == 0) return row;
  std::vector<int64_t> order(static_cast<size_t>(nvb));
  for (int64_t b = 0; b < nvb; ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const int ta = index_block_tier(in, nvb, a), tb = index_block_tier(in, nvb, b);
    if (ta != tb) return ta > tb;
    if (ta == 0 && scores[a] != scores[b]) return scores[a] > scores[b];
    return a < b;
  });
  const int64_t keep = std::min<int64_t>(in.topk, nvb);
  order.resize(static_cast<size_t>(keep));
  std::sort(order.begin(), order.end());
  for (int64_t i = 0; i < keep; ++i) row[i] = static_cast<int32_t>(order[i]);
  return row;
}

std::vector<int32_t> index_topk(const IndexTopkInput& in) {
  const int64_t rows = static_cast<int64_t>(in.row_position.size());
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(in.num_heads * rows * in.width));
  for (int64_t h = 0; h < in.num_heads; ++h) {
    for (int64_t t = 0; t < rows; ++t) {
      const std::vector<int32_t> row = index_topk_row(in, t, h);
      out.insert(out.end(), row.begin(), row.end());
    }
  }
  return out;
}

}  // namespace oracle
}  // namespace msa
