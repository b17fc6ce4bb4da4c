#include "oracle/attention_oracle.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace msa {
namespace oracle {
namespace {

// Softmax attention of one query vector over the given keys (each a pointer to D K values and
// D V values), written to out[0..D) and *lse.
struct KeyRef {
  const double* k;
  const double* v;
};

void softmax_attend(const double* q, int64_t d, double scale, const std::vector<KeyRef>& keys,
                    double* out, double* lse) {
  for (int64_t e = 0; e < d; ++e) out[e] = 0.0;
  if (keys.empty()) {
    *lse = -std::numeric_limits<double>::infinity();
    return;
  }
  std::vector<double> s(keys.size());
  double m = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < keys.size(); ++j) {
    double dot = 0.0;
    for (int64_t e = 0; e < d; ++e) dot += q[e] * keys[j].k[e];
    s[j] = scale * dot;
    m = std::max(m, s[j]);
  }
  double sum = 0.0;
  for (size_t j = 0; j < keys.size(); ++j) {
    const double w = std::exp(s[j] - m);
    sum += w;
    for (int64_t e = 0; e < d; ++e) out[e] += w * keys[j].v[e];
  }
  for (int64_t e = 0; e < d; ++e) out[e] /= sum;
  *lse = m + std::log(sum);
}

}  // namespace

AttentionResult attention(const AttentionBatch& b, const std::vector<double>& q,
                          const KvValues& kv) {
  const int64_t rows = static_cast<int64_t>(b.row_pos.size());
  const int64_t hq = b.num_q_heads, d = b.head_dim, bs = kv.block_size;
  const int64_t group = hq / b.num_kv_heads;
  AttentionResult r;
  r.out.assign(static_cast<size_t>(rows * hq * d), 0.0);
  r.lse.assign(static_cast<size_t>(rows * hq), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t req = b.row_request[t], p = b.row_pos[t];
    for (int64_t g = 0; g < b.num_kv_heads; ++g) {
      std::vector<KeyRef> keys;
      if (req >= 0 && p >= 0) {
        const int64_t end = std::min(p + 1, b.seq_lens[req]);
        std::set<int64_t> sel;
        if (b.sparse) {
          for (int64_t i = 0; i < b.topk_width; ++i) {
            const int32_t id = b.topk[(g * b.topk_rows + t) * b.topk_width + i];
            if (id >= 0) sel.insert(id);
          }
        }
        for (int64_t j = 0; j < end; ++j) {
          if (b.sparse && sel.count(j / bs) == 0) continue;
          const int64_t page = b.block_table[req * b.max_blocks + j / bs];
          keys.push_back(
              {&kv.k[kv.index(page, g, j % bs, 0)], &kv.v[kv.index(page, g, j % bs, 0)]});
        }
      }
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        softmax_attend(&q[(t * hq + h) * d], d, b.scale, keys, &r.out[(t * hq + h) * d],
                       &r.lse[t * hq + h]);
      }
    }
  }
  return r;
}

AttentionResult page16_attention(const std::vector<double>& q, int64_t num_q_heads, double scale,
                                 const std::vector<int32_t>& table, int64_t width,
                                 const std::vector<int32_t>& context_lens, int64_t page_stride,
                                 const KvValues& kv) {
  const int64_t hkv = kv.num_kv_heads, d = kv.head_dim;
  const int64_t group = num_q_heads / hkv;
  const int64_t rows = static_cast<int64_t>(context_lens.size()) / hkv;
  AttentionResult r;
  r.out.assign(static_cast<size_t>(rows * num_q_heads * d), 0.0);
  r.lse.assign(static_cast<size_t>(rows * num_q_heads), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < hkv; ++h) {
      const int64_t row = t * hkv + h;
      std::vector<KeyRef> keys;
      for (int64_t i = 0; i < context_lens[row]; ++i) {
        const int64_t id = table[row * width + i / 16];
        const int64_t head = id % hkv, sub = id / hkv;
        const int64_t page = sub / page_stride;
        const int64_t tok = 16 * (sub % page_stride) + i % 16;
        keys.push_back({&kv.k[kv.index(page, head, tok, 0)], &kv.v[kv.index(page, head, tok, 0)]});
      }
      for (int64_t hh = h * group; hh < (h + 1) * group; ++hh) {
        softmax_attend(&q[(t * num_q_heads + hh) * d], d, scale, keys,
                       &r.out[(t * num_q_heads + hh) * d], &r.lse[t * num_q_heads + hh]);
      }
    }
  }
  return r;
}

}  // namespace oracle
}  // namespace msa
