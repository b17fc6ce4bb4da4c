// CPU backend of the indexer top-k ops (spec A2-A4, A12): per (row, index head), fp32 block
// scores over the row's visible blocks, then a deterministic top-k under the total order
// (tier, score, lower block id). Every value read from a tensor is validated before anything
// is written.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/backends.h"
#include "core/index_topk_problem.h"
#include "core/thread_pool.h"
#include "core/validate.h"
#include "msa/dtype.h"
#include "msa/indexer.h"

namespace msa {
namespace cpu {
namespace {

// One call of either form, with the row layout resolved: decode rows have `query_len` rows
// per request; prefill rows (query_len == 0) follow `cu_seqlens_q`.
// The shared problem plus host reads of its small int32 tensors (CPU tensors only).
struct Problem : detail::IndexTopkProblem {
  explicit Problem(const detail::IndexTopkProblem& pb) : detail::IndexTopkProblem(pb) {}

  int32_t seq_len(int64_t b) const { return seq_lens.ptr<int32_t>()[b * seq_lens.strides[0]]; }
  int32_t cu(int64_t b) const { return cu_seqlens_q.ptr<int32_t>()[b * cu_seqlens_q.strides[0]]; }
  int32_t page(int64_t b, int64_t j) const {
    return block_table.ptr<int32_t>()[b * block_table.strides[0] + j * block_table.strides[1]];
  }
};

// Row t's request and absolute position; position < 0 marks a padding row.
struct RowInfo {
  int64_t request = -1;
  int64_t position = -1;
};

RowInfo row_info(const Problem& pb, int64_t t) {
  RowInfo info;
  if (pb.query_len > 0) {
    info.request = t / pb.query_len;
    info.position = pb.seq_len(info.request) - pb.query_len + t % pb.query_len;
    return info;
  }
  const int64_t b_count = pb.num_requests();
  if (t >= pb.cu(b_count)) return info;
  // Last request b with cu[b] <= t; cu is validated non-decreasing, so it owns row t.
  int64_t lo = 0, hi = b_count;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (pb.cu(mid) <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t q_len = pb.cu(lo + 1) - pb.cu(lo);
  info.request = lo;
  info.position = pb.seq_len(lo) - q_len + (t - pb.cu(lo));
  return info;
}

// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1 (the index cache's block size comes
// from a shape and may be near INT64_MAX).
int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

Status fail(const Problem& pb, int32_t bit, const std::string& msg) {
  if (pb.error_flags.defined()) *pb.error_flags.ptr<int32_t>() |= bit;
  return detail::out_of_range(msg);
}

// Checks seq_lens[b] and, when the request has live rows, the block-table entries they read.
Status validate_request(const Problem& pb, int64_t b, bool has_live_rows) {
  const int64_t s = pb.seq_len(b);
  const int64_t bs = pb.block_size();
  const std::string at = "[" + std::to_string(b) + "] = " + std::to_string(s);
  if (s < 0) return fail(pb, kDeviceErrorSeqLen, "seq_lens" + at + ": negative sequence length");
  const int64_t used = ceil_div(s, bs);
  if (used > pb.max_blocks()) {
    return fail(pb, kDeviceErrorSeqLen,
                "seq_lens" + at + ": needs " + std::to_string(used) + " blocks, block_table has " +
                    std::to_string(pb.max_blocks()) + " columns");
  }
  if (!has_live_rows) return Status::Ok();
  for (int64_t j = 0; j < used; ++j) {
    const int64_t page = pb.page(b, j);
    if (page < 0 || page >= pb.num_blocks()) {
      return fail(pb, kDeviceErrorBlockId,
                  "block_table[" + std::to_string(b) + ", " + std::to_string(j) +
                      "] = " + std::to_string(page) +
                      ": outside [0, num_blocks = " + std::to_string(pb.num_blocks()) + ")");
    }
  }
  return Status::Ok();
}

Status validate_decode(const Problem& pb) {
  for (int64_t b = 0; b < pb.num_requests(); ++b) {
    MSA_RETURN_IF_ERROR(validate_request(pb, b, /*has_live_rows=*/pb.seq_len(b) > 0));
  }
  return Status::Ok();
}

Status validate_prefill(const Problem& pb) {
  const int64_t b_count = pb.num_requests();
  auto cu_at = [&](int64_t b) {
    return "cu_seqlens_q[" + std::to_string(b) + "] = " + std::to_string(pb.cu(b));
  };
  if (pb.cu(0) != 0) return fail(pb, kDeviceErrorQueryLen, cu_at(0) + ": expected 0");
  for (int64_t b = 0; b < b_count; ++b) {
    if (pb.cu(b + 1) < pb.cu(b)) {
      return fail(pb, kDeviceErrorQueryLen,
                  cu_at(b + 1) + ": decreasing (previous entry " + std::to_string(pb.cu(b)) + ")");
    }
  }
  if (pb.cu(b_count) > pb.num_rows()) {
    return fail(
        pb, kDeviceErrorQueryLen,
        cu_at(b_count) + ": exceeds the rows of index_q, T = " + std::to_string(pb.num_rows()));
  }
  for (int64_t b = 0; b < b_count; ++b) {
    const int64_t q_len = pb.cu(b + 1) - pb.cu(b);
    MSA_RETURN_IF_ERROR(validate_request(pb, b, q_len > 0));
    if (q_len > pb.seq_len(b)) {
      return fail(pb, kDeviceErrorQueryLen,
                  "cu_seqlens_q: request " + std::to_string(b) + " has " + std::to_string(q_len) +
                      " query rows but seq_lens[" + std::to_string(b) +
                      "] = " + std::to_string(pb.seq_len(b)));
    }
  }
  return Status::Ok();
}

float bf16_bits_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

// Exact e4m3 -> float for all 256 codes, built once.
const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = e4m3_to_float(static_cast<uint8_t>(i));
    return t;
  }();
  return table.data();
}

struct Bf16Key {
  using Storage = uint16_t;
  float load(Storage v) const { return bf16_bits_to_float(v); }
};

struct E4m3Key {
  using Storage = uint8_t;
  const float* table = e4m3_table();
  float load(Storage v) const { return table[v]; }
};

// Per-thread scratch: block scores and candidate ids (one per block a row can see) and the
// query row as floats (head_dim).
struct ScratchLayout {
  size_t scores = 0, ids = 0, query = 0, per_thread = 0;
};

// Sequence lengths are int32, so a row sees at most ceil(INT32_MAX / block_size) blocks,
// however wide the block table is. kInvalidArgument when the layout overflows int64 bytes.
Status scratch_layout(const Problem& pb, ScratchLayout* out) {
  const int64_t bs = pb.block_size();
  const int64_t blocks =
      std::min(pb.max_blocks(), ceil_div(std::numeric_limits<int32_t>::max(), bs));
  const int64_t block_bytes = detail::align_up(static_cast<size_t>(blocks) * sizeof(float));
  int64_t query_bytes = 0, per_thread = 0;
  MSA_RETURN_IF_ERROR(
      detail::checked_mul(pb.head_dim(), 4, "index_q: head_dim * 4 scratch bytes", &query_bytes));
  MSA_RETURN_IF_ERROR(detail::checked_add(query_bytes, 2 * block_bytes + 255,
                                          "index_q: per-thread scratch bytes", &per_thread));
  per_thread = per_thread / 256 * 256;
  int64_t total = 0;
  MSA_RETURN_IF_ERROR(
      detail::checked_mul(per_thread, detail::kMaxThreads, "index_q: workspace bytes", &total));
  ScratchLayout l;
  l.scores = 0;
  l.ids = static_cast<size_t>(block_bytes);
  l.query = l.ids + static_cast<size_t>(block_bytes);
  l.per_thread = static_cast<size_t>(per_thread);
  *out = l;
  return Status::Ok();
}

// Scores the unforced visible blocks [0, nvb) of one row against the query `q` (floats).
// Keys are dotted in order d = 0..Di-1; every product of bf16/e4m3 operands is exact in fp32,
// so only the additions round.
template <typename Key>
void score_blocks(const Problem& pb, int64_t request, int64_t position, int64_t nvb, const float* q,
                  float* scores) {
  const Key key;
  const auto* cache = pb.index_cache.ptr<typename Key::Storage>();
  const int64_t bs = pb.block_size(), di = pb.head_dim();
  const int64_t page_stride = pb.index_cache.strides[0], key_stride = pb.index_cache.strides[1];
  const int64_t init = pb.params.init_blocks;
  const int64_t local_start = nvb - pb.params.local_blocks;
  for (int64_t b = 0; b < nvb; ++b) {
    if (b < init || b >= local_start) continue;  // forced: the score does not matter
    const auto* block = cache + pb.page(request, b) * page_stride;
    const int64_t keys = std::min(bs, position + 1 - b * bs);
    // Four keys at a time, each summed in its own fixed order d = 0..Di-1: independent chains
    // for the CPU to overlap, with results identical to one key at a time.
    float best = -INFINITY;
    auto take = [&best](float acc) {
      if (std::isnan(acc)) acc = -1e30f;  // spec A12: NaN ranks below every real score
      best = std::max(best, acc);
    };
    int64_t j = 0;
    for (; j + 4 <= keys; j += 4) {
      const auto* k0 = block + j * key_stride;
      const auto* k1 = k0 + key_stride;
      const auto* k2 = k1 + key_stride;
      const auto* k3 = k2 + key_stride;
      float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
      for (int64_t d = 0; d < di; ++d) {
        a0 += q[d] * key.load(k0[d]);
        a1 += q[d] * key.load(k1[d]);
        a2 += q[d] * key.load(k2[d]);
        a3 += q[d] * key.load(k3[d]);
      }
      take(a0);
      take(a1);
      take(a2);
      take(a3);
    }
    for (; j < keys; ++j) {
      const auto* k = block + j * key_stride;
      float acc = 0.0f;
      for (int64_t d = 0; d < di; ++d) acc += q[d] * key.load(k[d]);
      take(acc);
    }
    scores[b] = best;
  }
}

void compute_item(const Problem& pb, int64_t t, int64_t h, char* scratch,
                  const ScratchLayout& layout) {
  int32_t* out =
      pb.topk_out.ptr<int32_t>() + h * pb.topk_out.strides[0] + t * pb.topk_out.strides[1];
  const int64_t width = pb.topk_out.shape[2];
  const RowInfo row = row_info(pb, t);
  if (row.position < 0) {
    std::fill(out, out + width, -1);
    return;
  }
  auto* scores = reinterpret_cast<float*>(scratch + layout.scores);
  auto* ids = reinterpret_cast<int32_t*>(scratch + layout.ids);
  auto* q = reinterpret_cast<float*>(scratch + layout.query);

  const int64_t di = pb.head_dim();
  const int64_t q_offset = t * pb.index_q.strides[0] + h * pb.index_q.strides[1];
  if (pb.index_q.dtype == DType::kBF16) {
    const uint16_t* src = pb.index_q.ptr<uint16_t>() + q_offset;
    for (int64_t d = 0; d < di; ++d) q[d] = bf16_bits_to_float(src[d]);
  } else {
    const uint8_t* src = pb.index_q.ptr<uint8_t>() + q_offset;
    const float* table = e4m3_table();
    for (int64_t d = 0; d < di; ++d) q[d] = table[src[d]];
  }

  const int64_t nvb = row.position / pb.block_size() + 1;
  if (pb.index_cache.dtype == DType::kBF16) {
    score_blocks<Bf16Key>(pb, row.request, row.position, nvb, q, scores);
  } else {
    score_blocks<E4m3Key>(pb, row.request, row.position, nvb, q, scores);
  }

  // Total order: init tier above local tier above scored blocks; scores descending; ties and
  // the forced tiers go to the lower id. Distinct ids make the top-k set unique.
  const int64_t init = pb.params.init_blocks;
  const int64_t local_start = nvb - pb.params.local_blocks;
  auto tier = [&](int32_t b) { return b < init ? 2 : (b >= local_start ? 1 : 0); };
  auto better = [&](int32_t a, int32_t b) {
    const int ta = tier(a), tb = tier(b);
    if (ta != tb) return ta > tb;
    if (ta == 0 && scores[a] != scores[b]) return scores[a] > scores[b];
    return a < b;
  };
  for (int64_t b = 0; b < nvb; ++b) ids[b] = static_cast<int32_t>(b);
  const int64_t keep = std::min<int64_t>(pb.params.topk, nvb);
  std::partial_sort(ids, ids + keep, ids + nvb, better);
  std::sort(ids, ids + keep);
  std::copy(ids, ids + keep, out);
  std::fill(out + keep, out + width, -1);
}

Status run_problem(const Problem& pb, Workspace workspace, Stream stream) {
  ScratchLayout layout;
  MSA_RETURN_IF_ERROR(scratch_layout(pb, &layout));
  MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, layout.per_thread * detail::kMaxThreads));
  MSA_RETURN_IF_ERROR(pb.query_len > 0 ? validate_decode(pb) : validate_prefill(pb));
  const int64_t heads = pb.num_heads();
  char* base = static_cast<char*>(workspace.data);
  return detail::parallel_for(
      pb.num_rows() * heads, stream, [&](int64_t begin, int64_t end, int thread) {
        char* scratch = base + static_cast<size_t>(thread) * layout.per_thread;
        for (int64_t i = begin; i < end; ++i)
          compute_item(pb, i / heads, i % heads, scratch, layout);
      });
}

Status workspace_bytes(const Problem& pb, size_t* bytes) {
  ScratchLayout layout;
  MSA_RETURN_IF_ERROR(scratch_layout(pb, &layout));
  *bytes = layout.per_thread * detail::kMaxThreads;
  return Status::Ok();
}

}  // namespace

Status workspace_size(const IndexTopkDecodeArgs& args, size_t* bytes) {
  return workspace_bytes(Problem(detail::index_topk_problem(args)), bytes);
}

Status run(const IndexTopkDecodeArgs& args, Workspace workspace, Stream stream) {
  return run_problem(Problem(detail::index_topk_problem(args)), workspace, stream);
}

Status workspace_size(const IndexTopkPrefillArgs& args, size_t* bytes) {
  return workspace_bytes(Problem(detail::index_topk_problem(args)), bytes);
}

Status run(const IndexTopkPrefillArgs& args, Workspace workspace, Stream stream) {
  return run_problem(Problem(detail::index_topk_problem(args)), workspace, stream);
}

}  // namespace cpu
}  // namespace msa
