// CPU reference backend of the attention ops (spec A5): sparse decode, sparse prefill and dense
// causal GQA over the paged KV cache.
//
// Arithmetic (the reference every other backend is compared with): K and V are dequantised to
// fp32 (x = float(stored) * scale), scores are softmax_scale * <q, k> in fp32, and an fp32
// online softmax visits the attended blocks in ascending block order, one block at a time.
// Sparse and dense rows share this code, so a sparse row whose top-k lists every visible block
// is bitwise equal to the dense row. The output is rounded once to out's dtype.
//
// Work items are (row, KV head, slice of the head group): each item dequantises the K/V rows of
// a block once and reuses them for all q heads of its slice. A head's result depends only on
// its own arithmetic, never on how heads are sliced or on the thread count, so results are
// bitwise identical for every Stream::cpu_threads.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/backends.h"
#include "core/validate.h"
#include "cpu/parallel.h"
#include "msa/dtype.h"

namespace msa {
namespace cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

enum class Form { kDecode, kPrefill, kDense };

// One attention call with every form's fields in one place.
struct Problem {
  Form form = Form::kDense;
  int64_t query_len = 0;  // decode only
  float scale = 0.0f;
  TensorView q;
  KvCacheView kv;
  TensorView block_table, seq_lens, cu_seqlens_q, topk, out, lse, error_flags;

  int64_t num_rows = 0, num_q_heads = 0, num_kv_heads = 0, group = 0, head_dim = 0;
  int64_t block_size = 0, num_blocks = 0, num_requests = 0, max_blocks = 0, topk_width = 0;
};

Problem make_problem(Form form, float softmax_scale, const TensorView& q, const KvCacheView& kv,
                     const TensorView& block_table, const TensorView& seq_lens,
                     const TensorView& out, const TensorView& lse, const TensorView& error_flags) {
  Problem p;
  p.form = form;
  p.q = q;
  p.kv = kv;
  p.block_table = block_table;
  p.seq_lens = seq_lens;
  p.out = out;
  p.lse = lse;
  p.error_flags = error_flags;
  p.num_rows = q.shape[0];
  p.num_q_heads = q.shape[1];
  p.num_kv_heads = kv.num_kv_heads();
  p.group = p.num_q_heads / p.num_kv_heads;
  p.head_dim = kv.head_dim();
  p.block_size = kv.block_size();
  p.num_blocks = kv.num_blocks();
  p.num_requests = block_table.shape[0];
  p.max_blocks = block_table.shape[1];
  p.scale =
      softmax_scale != 0.0f ? softmax_scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  return p;
}

// Per-thread scratch, in floats: K and V rows of one block, q and accumulators of one group,
// the scores of one block, and the running max and sum of each head.
int64_t scratch_floats(int64_t block_size, int64_t head_dim, int64_t group) {
  return 2 * block_size * head_dim + 2 * group * head_dim + block_size + 2 * group;
}

size_t scratch_bytes_per_thread(int64_t block_size, int64_t head_dim, int64_t group) {
  return detail::align_up(static_cast<size_t>(scratch_floats(block_size, head_dim, group)) *
                          sizeof(float));
}

size_t workspace_bytes(const TensorView& q, const KvCacheView& kv) {
  const int64_t group = q.shape[1] / kv.num_kv_heads();
  return static_cast<size_t>(kMaxThreads) *
         scratch_bytes_per_thread(kv.block_size(), kv.head_dim(), group);
}

int32_t at(const TensorView& t, int64_t i) { return t.ptr<int32_t>()[i * t.strides[0]]; }
int32_t at(const TensorView& t, int64_t i, int64_t j) {
  return t.ptr<int32_t>()[i * t.strides[0] + j * t.strides[1]];
}
int32_t at(const TensorView& t, int64_t i, int64_t j, int64_t k) {
  return t.ptr<int32_t>()[i * t.strides[0] + j * t.strides[1] + k * t.strides[2]];
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The request and absolute position of a row; request -1 for padding rows past the batch.
struct RowInfo {
  int64_t request = -1;
  int64_t pos = -1;
};

RowInfo row_info(const Problem& p, int64_t t) {
  RowInfo r;
  if (p.form == Form::kDecode) {
    r.request = t / p.query_len;
    r.pos = at(p.seq_lens, r.request) - p.query_len + t % p.query_len;
    return r;
  }
  if (t >= at(p.cu_seqlens_q, p.num_requests)) return r;
  // The last request b with cu_seqlens_q[b] <= t (requests with no rows are skipped over).
  int64_t lo = 0, hi = p.num_requests;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (at(p.cu_seqlens_q, mid) <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t begin = at(p.cu_seqlens_q, lo);
  const int64_t rows = at(p.cu_seqlens_q, lo + 1) - begin;
  r.request = lo;
  r.pos = at(p.seq_lens, lo) - rows + (t - begin);
  return r;
}

// Smallest selected block id above `after` in topk[g, t, :], or -1. Scanning for the next id
// visits the selection in ascending order whatever the order of the entries, and counts a
// duplicated id once: the top-k row is treated as a set.
int64_t next_selected(const Problem& p, int64_t g, int64_t t, int64_t after) {
  int64_t best = -1;
  for (int64_t i = 0; i < p.topk_width; ++i) {
    const int64_t id = at(p.topk, g, t, i);
    if (id > after && (best < 0 || id < best)) best = id;
  }
  return best;
}

// Records a bad tensor value: ORs the DeviceError bit into error_flags and builds the status.
Status value_error(const Problem& p, DeviceError bit, const std::string& msg) {
  if (p.error_flags.defined()) *p.error_flags.ptr<int32_t>() |= bit;
  return detail::out_of_range(msg);
}

// Validates every value the op reads before anything is written.
Status validate_values(const Problem& p) {
  for (int64_t b = 0; b < p.num_requests; ++b) {
    const int64_t s = at(p.seq_lens, b);
    if (s < 0 || ceil_div(s, p.block_size) > p.max_blocks) {
      return value_error(p, kDeviceErrorSeqLen,
                         "seq_lens[" + std::to_string(b) + "] = " + std::to_string(s) +
                             ": expected 0..max_blocks * block_size = " +
                             std::to_string(p.max_blocks * p.block_size));
    }
    // Decode rows at negative positions are padding (spec A8), whatever seq_len is.
    if (p.form == Form::kDecode) continue;
    const int64_t begin = at(p.cu_seqlens_q, b), end = at(p.cu_seqlens_q, b + 1);
    if ((b == 0 && begin != 0) || end < begin || end > p.num_rows || end - begin > s) {
      return value_error(p, kDeviceErrorQueryLen,
                         "cu_seqlens_q[" + std::to_string(b) + ".." + std::to_string(b + 1) +
                             "] = " + std::to_string(begin) + ", " + std::to_string(end) +
                             ": expected to start at 0, not decrease, stay <= T = " +
                             std::to_string(p.num_rows) + " and give at most seq_lens[" +
                             std::to_string(b) + "] = " + std::to_string(s) + " rows");
    }
  }
  auto check_page = [&](int64_t request, int64_t block) {
    const int64_t page = at(p.block_table, request, block);
    if (page < 0 || page >= p.num_blocks) {
      return value_error(p, kDeviceErrorBlockId,
                         "block_table[" + std::to_string(request) + ", " + std::to_string(block) +
                             "] = " + std::to_string(page) + ": expected a page in [0, " +
                             std::to_string(p.num_blocks) + ")");
    }
    return Status::Ok();
  };
  if (p.form == Form::kDense) {
    // Dense rows read every used block of a request that has query rows.
    for (int64_t b = 0; b < p.num_requests; ++b) {
      if (at(p.cu_seqlens_q, b + 1) == at(p.cu_seqlens_q, b)) continue;
      const int64_t used = ceil_div(at(p.seq_lens, b), p.block_size);
      for (int64_t blk = 0; blk < used; ++blk) MSA_RETURN_IF_ERROR(check_page(b, blk));
    }
    return Status::Ok();
  }
  // Sparse rows read exactly the selected blocks; padded rows read nothing.
  for (int64_t t = 0; t < p.num_rows; ++t) {
    const RowInfo r = row_info(p, t);
    if (r.request < 0 || r.pos < 0) continue;
    const int64_t own = r.pos / p.block_size;
    for (int64_t g = 0; g < p.num_kv_heads; ++g) {
      for (int64_t i = 0; i < p.topk_width; ++i) {
        const int64_t id = at(p.topk, g, t, i);
        if (id < 0) continue;
        if (id > own) {
          return value_error(p, kDeviceErrorTopkId,
                             "topk[" + std::to_string(g) + ", " + std::to_string(t) + ", " +
                                 std::to_string(i) + "] = " + std::to_string(id) +
                                 ": beyond the visible blocks [0, " + std::to_string(own) +
                                 "] of row " + std::to_string(t) + " at position " +
                                 std::to_string(r.pos));
        }
        MSA_RETURN_IF_ERROR(check_page(r.request, id));
      }
    }
  }
  return Status::Ok();
}

const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = e4m3_to_float(static_cast<uint8_t>(i));
    return t;
  }();
  return table.data();
}

float load(DType dtype, const void* base, int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kE4M3:
      return e4m3_table()[static_cast<const uint8_t*>(base)[i]];
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    default:
      return 0.0f;
  }
}

void store(DType dtype, void* base, int64_t i, float x) {
  switch (dtype) {
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(x);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = float_to_f16(x);
      break;
    case DType::kF32:
      static_cast<float*>(base)[i] = x;
      break;
    default:
      break;
  }
}

// Converts n contiguous elements at element offset `offset` of `base` to fp32.
void load_row(DType dtype, const void* base, int64_t offset, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kBF16: {
      // bf16 is the top half of an fp32: widening the bits in place lets the loop vectorise
      // (the out-of-line bf16_to_float call dominated the dequantisation).
      const uint16_t* s = static_cast<const uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(s[i]) << 16;
        std::memcpy(dst + i, &bits, sizeof(float));
      }
      break;
    }
    case DType::kE4M3: {
      const uint8_t* s = static_cast<const uint8_t*>(base) + offset;
      const float* table = e4m3_table();
      for (int64_t i = 0; i < n; ++i) dst[i] = table[s[i]];
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = load(dtype, base, offset + i);
      break;
  }
}

// Dequantises tokens [0, n) of page `page`, KV head g, of one side (K or V) into dst [n, D].
void load_block(const Problem& p, const TensorView& side, const TensorView& scale, int64_t page,
                int64_t g, int64_t n, float* dst) {
  const int64_t d = p.head_dim;
  const int64_t base = page * side.strides[0] + g * side.strides[1];
  for (int64_t j = 0; j < n; ++j) {
    float* row = dst + j * d;
    load_row(side.dtype, side.data, base + j * side.strides[2], d, row);
    float s = 1.0f;
    if (p.kv.scale_mode == KvScaleMode::kPerLayer) {
      s = *scale.ptr<float>();
    } else if (p.kv.scale_mode == KvScaleMode::kPerTokenHead) {
      const int64_t slot = page * p.block_size + j;
      s = scale.ptr<float>()[g * scale.strides[0] + slot * scale.strides[1]];
    } else {
      continue;
    }
    for (int64_t i = 0; i < d; ++i) row[i] *= s;
  }
}

// fp32 dot product with eight interleaved partial sums combined in a fixed order: the same
// bits on every run, and a shape the compiler vectorises.
float dot(const float* a, const float* b, int64_t n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int u = 0; u < 8; ++u) part[u] += a[i + u] * b[i + u];
  }
  for (; i < n; ++i) part[i % 8] += a[i] * b[i];
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

// Computes rows t, KV head g, q heads g * group + [h_begin, h_end).
void attend(const Problem& p, int64_t t, int64_t g, int64_t h_begin, int64_t h_end,
            float* scratch) {
  const int64_t d = p.head_dim, bs = p.block_size, nh = h_end - h_begin;
  float* k_rows = scratch;
  float* v_rows = k_rows + bs * d;
  float* qs = v_rows + bs * d;
  float* acc = qs + p.group * d;
  float* scores = acc + p.group * d;
  float* m = scores + bs;
  float* l = m + p.group;

  for (int64_t i = 0; i < nh; ++i) {
    m[i] = kNegInf;
    l[i] = 0.0f;
    std::fill(acc + i * d, acc + (i + 1) * d, 0.0f);
  }

  const RowInfo r = row_info(p, t);
  if (r.request >= 0 && r.pos >= 0) {
    for (int64_t i = 0; i < nh; ++i) {
      const int64_t h = g * p.group + h_begin + i;
      load_row(p.q.dtype, p.q.data, t * p.q.strides[0] + h * p.q.strides[1], d, qs + i * d);
    }
    const int64_t own = r.pos / bs;
    int64_t blk = p.form == Form::kDense ? 0 : next_selected(p, g, t, -1);
    while (blk >= 0 && blk <= own) {
      const int64_t page = at(p.block_table, r.request, blk);
      const int64_t n = std::min(bs, r.pos + 1 - blk * bs);
      load_block(p, p.kv.k, p.kv.k_scale, page, g, n, k_rows);
      load_block(p, p.kv.v, p.kv.v_scale, page, g, n, v_rows);
      for (int64_t i = 0; i < nh; ++i) {
        const float* qh = qs + i * d;
        float block_max = kNegInf;
        for (int64_t j = 0; j < n; ++j) {
          scores[j] = p.scale * dot(qh, k_rows + j * d, d);
          if (scores[j] > block_max) block_max = scores[j];
        }
        // A block whose scores are all -inf adds exp(-inf) = 0 to every sum.
        if (block_max == kNegInf) continue;
        const float m_new = std::max(m[i], block_max);
        const float alpha = std::exp(m[i] - m_new);
        float* acc_h = acc + i * d;
        if (alpha != 1.0f) {
          l[i] *= alpha;
          for (int64_t e = 0; e < d; ++e) acc_h[e] *= alpha;
        }
        for (int64_t j = 0; j < n; ++j) {
          const float w = std::exp(scores[j] - m_new);
          l[i] += w;
          const float* vj = v_rows + j * d;
          for (int64_t e = 0; e < d; ++e) acc_h[e] += w * vj[e];
        }
        m[i] = m_new;
      }
      blk = p.form == Form::kDense ? blk + 1 : next_selected(p, g, t, blk);
    }
  }

  for (int64_t i = 0; i < nh; ++i) {
    const int64_t h = g * p.group + h_begin + i;
    const int64_t base = t * p.out.strides[0] + h * p.out.strides[1];
    const bool has_keys = l[i] > 0.0f;
    for (int64_t e = 0; e < d; ++e) {
      store(p.out.dtype, p.out.data, base + e, has_keys ? acc[i * d + e] / l[i] : 0.0f);
    }
    if (p.lse.defined()) {
      p.lse.ptr<float>()[t * p.lse.strides[0] + h * p.lse.strides[1]] =
          has_keys ? m[i] + std::log(l[i]) : kNegInf;
    }
  }
}

Status run_problem(const Problem& p, Workspace workspace, const Stream& stream) {
  const size_t per_thread = scratch_bytes_per_thread(p.block_size, p.head_dim, p.group);
  MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, per_thread * kMaxThreads));
  MSA_RETURN_IF_ERROR(validate_values(p));

  // Slicing head groups only when there are fewer (row, KV head) pairs than threads keeps
  // every thread busy in small decode batches; it does not change any head's arithmetic.
  const int64_t pairs = p.num_rows * p.num_kv_heads;
  if (pairs == 0) return Status::Ok();
  const int64_t threads = resolve_threads(stream);
  const int64_t slices = std::clamp<int64_t>(ceil_div(threads, pairs), 1, p.group);
  char* ws = static_cast<char*>(workspace.data);
  parallel_for(pairs * slices, stream, [&](int64_t begin, int64_t end, int thread) {
    float* scratch = reinterpret_cast<float*>(ws + per_thread * static_cast<size_t>(thread));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t slice = item % slices;
      const int64_t pair = item / slices;
      attend(p, pair / p.num_kv_heads, pair % p.num_kv_heads, slice * p.group / slices,
             (slice + 1) * p.group / slices, scratch);
    }
  });
  return Status::Ok();
}

}  // namespace

Status workspace_size(const SparseAttentionDecodeArgs& args, size_t* bytes) {
  *bytes = workspace_bytes(args.q, args.kv_cache);
  return Status::Ok();
}

Status run(const SparseAttentionDecodeArgs& args, Workspace workspace, Stream stream) {
  Problem p = make_problem(Form::kDecode, args.softmax_scale, args.q, args.kv_cache,
                           args.block_table, args.seq_lens, args.out, args.lse, args.error_flags);
  p.query_len = args.query_len;
  p.topk = args.topk;
  p.topk_width = args.topk.shape[2];
  return run_problem(p, workspace, stream);
}

Status workspace_size(const SparseAttentionPrefillArgs& args, size_t* bytes) {
  *bytes = workspace_bytes(args.q, args.kv_cache);
  return Status::Ok();
}

Status run(const SparseAttentionPrefillArgs& args, Workspace workspace, Stream stream) {
  Problem p = make_problem(Form::kPrefill, args.softmax_scale, args.q, args.kv_cache,
                           args.block_table, args.seq_lens, args.out, args.lse, args.error_flags);
  p.cu_seqlens_q = args.cu_seqlens_q;
  p.topk = args.topk;
  p.topk_width = args.topk.shape[2];
  return run_problem(p, workspace, stream);
}

Status workspace_size(const DenseAttentionArgs& args, size_t* bytes) {
  *bytes = workspace_bytes(args.q, args.kv_cache);
  return Status::Ok();
}

Status run(const DenseAttentionArgs& args, Workspace workspace, Stream stream) {
  Problem p = make_problem(Form::kDense, args.softmax_scale, args.q, args.kv_cache,
                           args.block_table, args.seq_lens, args.out, args.lse, args.error_flags);
  p.cu_seqlens_q = args.cu_seqlens_q;
  return run_problem(p, workspace, stream);
}

}  // namespace cpu
}  // namespace msa
