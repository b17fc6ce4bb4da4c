// How many distinct blocks the prefill rows of a window of consecutive positions select
// together: the blocks a sparse prefill tile over those rows must read (one tile = the tokens of
// one request in an aligned window of positions, all q heads of an index head), against the
// per-row top-k width. `msa run --topk-union` gathers it from every prefill index op.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace msa {
namespace engine {

// Window widths, in positions (windows are aligned to multiples of their width): 4 = the tokens
// of a 64-row wgmma at 16 q heads a KV head, 8 = a tile of the tensor-core kernel, 16 and 32 =
// tiles two and four times as tall (or CTA pairs and quads sharing their loads).
constexpr int kUnionWindowCount = 4;
constexpr int kUnionWindows[kUnionWindowCount] = {4, 8, 16, 32};

struct TopkUnion {
  int64_t rows = 0;                         // prefill rows counted, per index head
  int64_t selected = 0;                     // their distinct selected blocks, summed over rows
  int64_t windows[kUnionWindowCount] = {};  // (request, head, window) groups seen
  int64_t blocks[kUnionWindowCount] = {};   // their distinct selected blocks, summed

  void add(const TopkUnion& o) {
    rows += o.rows;
    selected += o.selected;
    for (int w = 0; w < kUnionWindowCount; ++w) {
      windows[w] += o.windows[w];
      blocks[w] += o.blocks[w];
    }
  }
};

// Adds n rows of one request and index head, at positions start .. start + n - 1: row i's top-k
// is topk[i * k .. i * k + k). Negative entries are empty; a block repeated in a row counts
// once. A window only partly inside the rows counts the rows it has (tiles are per call, so a
// chunk boundary splits a window the same way).
inline void add_request_rows(const int32_t* topk, int k, int64_t start, int64_t n, TopkUnion* u) {
  // stamp[id] = the last group (a row, or a window) that counted block id: each entry is looked at
  // once per group, with no sort (the engine passes ~36 M rows a run through here).
  int32_t max_id = -1;
  for (int64_t e = 0; e < n * k; ++e) max_id = std::max(max_id, topk[e]);
  std::vector<int64_t> stamp(static_cast<size_t>(max_id) + 1, -1);
  int64_t group = 0;
  auto distinct = [&](int64_t r0, int64_t r1) {
    int64_t c = 0;
    for (int64_t e = r0 * k; e < r1 * k; ++e) {
      const int32_t id = topk[e];
      if (id >= 0 && stamp[static_cast<size_t>(id)] != group) {
        stamp[static_cast<size_t>(id)] = group;
        ++c;
      }
    }
    ++group;
    return c;
  };
  for (int64_t i = 0; i < n; ++i) u->selected += distinct(i, i + 1);
  u->rows += n;
  for (int w = 0; w < kUnionWindowCount; ++w) {
    const int64_t width = kUnionWindows[w];
    for (int64_t i = 0; i < n;) {
      const int64_t window_end = ((start + i) / width + 1) * width;
      const int64_t end = std::min(n, window_end - start);
      u->blocks[w] += distinct(i, end);
      ++u->windows[w];
      i = end;
    }
  }
}

}  // namespace engine
}  // namespace msa
