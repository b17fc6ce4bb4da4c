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
//
// Speed without changing a bit: within an item, each score keeps the reference summation order
// (eight interleaved partial sums, see qk_tile) but tiles of 2 heads x 2 keys share loads; the
// P.V update keeps each accumulator's order (rescale, then keys in order) but holds 16 columns
// of 2 heads in registers across a block's keys; K is dequantised in L1-sized chunks and V is
// swept in column strips used by every head. The kernels are plain vector code, compiled for
// the x86-64 baseline and again for AVX2 (no FMA), chosen at run time; both give the same bits.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/attention_problem.h"
#include "core/backends.h"
#include "core/thread_pool.h"
#include "core/validate.h"
#include "msa/dtype.h"

namespace msa {
namespace cpu {
namespace {

// Kernel helpers are force-inlined so that the AVX2 instantiation compiles them for AVX2.
#if defined(__GNUC__)
#define MSA_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define MSA_ALWAYS_INLINE inline
#endif

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Keys whose fp32 K rows are dequantised at a time, sized to stay in L1 while every head uses
// them.
constexpr int64_t kKeyChunk = 32;

using Form = detail::AttentionForm;
using Problem = detail::AttentionProblem;

// Row stride of the fp32 scratch rows: head_dim rounded up to whole 8-float groups. The padding
// columns hold zeros, which leave every partial sum of the dot product unchanged (see qk_tile).
int64_t padded_dim(int64_t head_dim) { return (head_dim + 7) / 8 * 8; }

// Keys of a block held as fp32 K rows at a time.
int64_t k_chunk_rows(int64_t block_size) { return std::min(block_size, kKeyChunk); }

// Per-thread scratch, in floats: K rows of one key chunk and V rows of one block, q and
// accumulators of one group, the scores (then softmax weights) of one block for each head of
// the group, and per head the running max and sum, the block's rescale factor and an active
// flag. In bytes, 256-aligned; kInvalidArgument when the shapes make it overflow.
Status scratch_bytes_per_thread(int64_t block_size, int64_t head_dim, int64_t group,
                                size_t* bytes) {
  const int64_t dp = padded_dim(head_dim);
  bool ok = true;
  auto mul = [&ok](int64_t a, int64_t b) {
    int64_t r = 0;
    ok = ok && !__builtin_mul_overflow(a, b, &r);
    return r;
  };
  auto add = [&ok](int64_t a, int64_t b) {
    int64_t r = 0;
    ok = ok && !__builtin_add_overflow(a, b, &r);
    return r;
  };
  const int64_t floats =
      add(add(mul(add(k_chunk_rows(block_size), block_size), dp), mul(mul(2, group), dp)),
          add(mul(group, block_size), mul(4, group)));
  const int64_t per_thread = mul(add(mul(floats, 4), 255) / 256, 256);
  mul(per_thread, detail::kMaxThreads);  // the whole workspace must fit as well
  if (!ok) {
    return detail::invalid("workspace: the CPU attention scratch for block_size " +
                           std::to_string(block_size) + ", head_dim " + std::to_string(head_dim) +
                           " and " + std::to_string(group) +
                           " q heads per KV head does not fit int64 bytes");
  }
  *bytes = static_cast<size_t>(per_thread);
  return Status::Ok();
}

Status workspace_bytes(const TensorView& q, const KvCacheView& kv, size_t* bytes) {
  size_t per_thread = 0;
  MSA_RETURN_IF_ERROR(scratch_bytes_per_thread(kv.block_size(), kv.head_dim(),
                                               q.shape[1] / kv.num_kv_heads(), &per_thread));
  *bytes = per_thread * detail::kMaxThreads;
  return Status::Ok();
}

int32_t at(const TensorView& t, int64_t i) { return t.ptr<int32_t>()[i * t.strides[0]]; }
int32_t at(const TensorView& t, int64_t i, int64_t j) {
  return t.ptr<int32_t>()[i * t.strides[0] + j * t.strides[1]];
}
int32_t at(const TensorView& t, int64_t i, int64_t j, int64_t k) {
  return t.ptr<int32_t>()[i * t.strides[0] + j * t.strides[1] + k * t.strides[2]];
}

// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1 (block sizes come from shapes and
// may be near INT64_MAX).
int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

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
  if (t >= at(p.cu_seqlens_q, p.num_requests())) return r;
  // The last request b with cu_seqlens_q[b] <= t (requests with no rows are skipped over).
  int64_t lo = 0, hi = p.num_requests();
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
  for (int64_t i = 0; i < p.topk_width(); ++i) {
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
  // Checked before the requests: with none, row_info still reads cu_seqlens_q[0] and relies on
  // it being 0 (a larger value would send rows below it to a request that does not exist).
  if (p.form != Form::kDecode && at(p.cu_seqlens_q, 0) != 0) {
    return value_error(
        p, kDeviceErrorQueryLen,
        "cu_seqlens_q[0] = " + std::to_string(at(p.cu_seqlens_q, 0)) + ": expected 0");
  }
  for (int64_t b = 0; b < p.num_requests(); ++b) {
    const int64_t s = at(p.seq_lens, b);
    if (s < 0 || ceil_div(s, p.block_size()) > p.max_blocks()) {
      return value_error(p, kDeviceErrorSeqLen,
                         "seq_lens[" + std::to_string(b) + "] = " + std::to_string(s) +
                             ": expected 0..max_blocks * block_size (max_blocks " +
                             std::to_string(p.max_blocks()) + ", block_size " +
                             std::to_string(p.block_size()) + ")");
    }
    // Decode rows at negative positions are padding (spec A8), whatever seq_len is.
    if (p.form == Form::kDecode) continue;
    const int64_t begin = at(p.cu_seqlens_q, b), end = at(p.cu_seqlens_q, b + 1);
    // In the dense form (which also serves decode batches) a request with seq_len 0 is a padded
    // decode request: its rows, however many, sit at negative positions and attend to nothing.
    const bool padded = p.form == Form::kDense && s == 0;
    if (end < begin || end > p.num_rows() || (end - begin > s && !padded)) {
      return value_error(p, kDeviceErrorQueryLen,
                         "cu_seqlens_q[" + std::to_string(b) + ".." + std::to_string(b + 1) +
                             "] = " + std::to_string(begin) + ", " + std::to_string(end) +
                             ": expected not to decrease, to stay <= T = " +
                             std::to_string(p.num_rows()) + " and give at most seq_lens[" +
                             std::to_string(b) + "] = " + std::to_string(s) + " rows");
    }
  }
  auto check_page = [&](int64_t request, int64_t block) {
    const int64_t page = at(p.block_table, request, block);
    if (page < 0 || page >= p.num_blocks()) {
      return value_error(p, kDeviceErrorBlockId,
                         "block_table[" + std::to_string(request) + ", " + std::to_string(block) +
                             "] = " + std::to_string(page) + ": expected a page in [0, " +
                             std::to_string(p.num_blocks()) + ")");
    }
    return Status::Ok();
  };
  if (p.form == Form::kDense) {
    // Dense rows read every used block of a request that has query rows.
    for (int64_t b = 0; b < p.num_requests(); ++b) {
      if (at(p.cu_seqlens_q, b + 1) == at(p.cu_seqlens_q, b)) continue;
      const int64_t used = ceil_div(at(p.seq_lens, b), p.block_size());
      for (int64_t blk = 0; blk < used; ++blk) MSA_RETURN_IF_ERROR(check_page(b, blk));
    }
    return Status::Ok();
  }
  // Sparse rows read exactly the selected blocks; padded rows read nothing.
  for (int64_t t = 0; t < p.num_rows(); ++t) {
    const RowInfo r = row_info(p, t);
    if (r.request < 0 || r.pos < 0) continue;
    const int64_t own = r.pos / p.block_size();
    for (int64_t g = 0; g < p.num_kv_heads(); ++g) {
      for (int64_t i = 0; i < p.topk_width(); ++i) {
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
MSA_ALWAYS_INLINE void load_row(DType dtype, const void* base, int64_t offset, int64_t n,
                                float* dst) {
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

// Dequantises tokens [j0, j0 + n) of page `page`, KV head g, of one side (K or V) into dst
// [n, ld] (columns [D, ld) are left as they are).
MSA_ALWAYS_INLINE void load_block(const Problem& p, const TensorView& side, const TensorView& scale,
                                  int64_t page, int64_t g, int64_t j0, int64_t n, int64_t ld,
                                  float* dst) {
  const int64_t d = p.head_dim();
  const int64_t base = page * side.strides[0] + g * side.strides[1];
  const float* scale_row = nullptr;
  float layer_scale = 1.0f;
  if (p.kv.scale_mode == KvScaleMode::kPerLayer) {
    layer_scale = *scale.ptr<float>();
  } else if (p.kv.scale_mode == KvScaleMode::kPerTokenHead) {
    scale_row = scale.ptr<float>() + g * scale.strides[0];
  }
  for (int64_t j = j0; j < j0 + n; ++j) {
    float* __restrict__ row = dst + (j - j0) * ld;
    load_row(side.dtype, side.data, base + j * side.strides[2], d, row);
    if (p.kv.scale_mode == KvScaleMode::kNone) continue;
    const float s = scale_row != nullptr ? scale_row[(page * p.block_size() + j) * scale.strides[1]]
                                         : layer_scale;
    for (int64_t i = 0; i < d; ++i) row[i] *= s;
  }
}

// Kernel code is written once over a vector type V of fp32 lanes and compiled twice: with F4
// (one SSE register, the x86-64 baseline) and, on x86-64 GCC/Clang, with F8 inside a function
// compiled for AVX2 and picked at run time when the CPU has it. Lanes are independent IEEE
// single-precision operations, so a vector op gives each lane the bits of the scalar op at any
// width. AVX2 is only a wider register file here: FMA is not enabled, so a product is always
// rounded before it is added, as in the scalar reference.
typedef float F4 __attribute__((vector_size(16)));
typedef float F8 __attribute__((vector_size(32)));

// Unaligned load and store (by reference: no vector crosses a call by value).
template <class V>
MSA_ALWAYS_INLINE void vload(V& x, const float* p) {
  std::memcpy(&x, p, sizeof(V));
}
template <class V>
MSA_ALWAYS_INLINE void vstore(float* p, const V& x) {
  std::memcpy(p, &x, sizeof(V));
}

// Scores of NH q heads against NK keys: s[a * s_ld + b] = scale * <q_a, k_b>, each dot product
// in fp32 with eight interleaved partial sums (partial u adds the products of the dims
// i = u (mod 8) in ascending i) combined as ((p0 + p4) + (p1 + p5)) + ((p2 + p6) + (p3 + p7)).
// This is the reference order; the partials are the lanes of 8 / lanes(V) vectors, and the tile
// computes NH * NK dot products side by side so that each q row and K row loaded is used more
// than once. Rows are zero-padded to dp (a multiple of 8): a partial sum starts at +0 and so is
// never -0, and adding the padding's +0 products leaves it bitwise unchanged.
template <class V, int NH, int NK>
MSA_ALWAYS_INLINE void qk_tile(const float* q, int64_t q_ld, const float* k, int64_t k_ld,
                               int64_t dp, float scale, float* s, int64_t s_ld) {
  constexpr int kLanes = static_cast<int>(sizeof(V) / sizeof(float));
  constexpr int kP = 8 / kLanes;
  V part[NH][NK][kP];
  for (int a = 0; a < NH; ++a) {
    for (int b = 0; b < NK; ++b) {
      for (int c = 0; c < kP; ++c) part[a][b][c] = V{};
    }
  }
  for (int64_t i = 0; i < dp; i += 8) {
    V kv[NK][kP];
    for (int b = 0; b < NK; ++b) {
      for (int c = 0; c < kP; ++c) vload(kv[b][c], k + b * k_ld + i + c * kLanes);
    }
    for (int a = 0; a < NH; ++a) {
      V qv[kP];
      for (int c = 0; c < kP; ++c) vload(qv[c], q + a * q_ld + i + c * kLanes);
      for (int b = 0; b < NK; ++b) {
        for (int c = 0; c < kP; ++c) part[a][b][c] += qv[c] * kv[b][c];
      }
    }
  }
  for (int a = 0; a < NH; ++a) {
    for (int b = 0; b < NK; ++b) {
      float x[8];
      std::memcpy(x, part[a][b], sizeof(x));
      s[a * s_ld + b] = scale * (((x[0] + x[4]) + (x[1] + x[5])) + ((x[2] + x[6]) + (x[3] + x[7])));
    }
  }
}

// Scores of heads [0, nh) (q rows at q, stride dp) against keys [0, n) (rows at k, stride dp)
// into s[head * s_ld + key], in tiles of two heads by two keys (four keys for a last odd head).
template <class V>
MSA_ALWAYS_INLINE void qk_block(const float* q, const float* k, int64_t nh, int64_t n, int64_t dp,
                                float scale, float* s, int64_t s_ld) {
  int64_t a = 0;
  for (; a + 2 <= nh; a += 2) {
    const float* qa = q + a * dp;
    float* sa = s + a * s_ld;
    int64_t b = 0;
    for (; b + 2 <= n; b += 2) qk_tile<V, 2, 2>(qa, dp, k + b * dp, dp, dp, scale, sa + b, s_ld);
    if (b < n) qk_tile<V, 2, 1>(qa, dp, k + b * dp, dp, dp, scale, sa + b, s_ld);
  }
  if (a < nh) {
    const float* qa = q + a * dp;
    float* sa = s + a * s_ld;
    int64_t b = 0;
    for (; b + 4 <= n; b += 4) qk_tile<V, 1, 4>(qa, dp, k + b * dp, dp, dp, scale, sa + b, s_ld);
    for (; b < n; ++b) qk_tile<V, 1, 1>(qa, dp, k + b * dp, dp, dp, scale, sa + b, s_ld);
  }
}

// P.V update of NH heads over keys [0, n) of a block: acc_a[e] = acc_a[e] * alpha_a (only when
// alpha_a != 1), then acc_a[e] += w_a[j] * v_j[e] for j = 0, 1, ... in order, which is the
// reference order for each element. W vectors of columns stay in registers across the keys.
template <class V, int NH, int W>
MSA_ALWAYS_INLINE void pv_cols(float* const* acc, const float* const* w, const float* alpha,
                               const float* v, int64_t v_ld, int64_t n, int64_t e0) {
  constexpr int kLanes = static_cast<int>(sizeof(V) / sizeof(float));
  V a[NH][W];
  for (int h = 0; h < NH; ++h) {
    for (int c = 0; c < W; ++c) vload(a[h][c], acc[h] + e0 + kLanes * c);
    if (alpha[h] != 1.0f) {
      for (int c = 0; c < W; ++c) a[h][c] *= alpha[h];
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v + j * v_ld + e0;
    V vv[W];
    for (int c = 0; c < W; ++c) vload(vv[c], vj + kLanes * c);
    for (int h = 0; h < NH; ++h) {
      const float wj = w[h][j];
      for (int c = 0; c < W; ++c) a[h][c] += wj * vv[c];
    }
  }
  for (int h = 0; h < NH; ++h) {
    for (int c = 0; c < W; ++c) vstore(acc[h] + e0 + kLanes * c, a[h][c]);
  }
}

// P.V update of the active heads of [0, nh) (acc rows at acc, stride dp; weights at
// w + head * w_ld) over keys [0, n): columns in strips of 16 floats (then one of 8; dp is a
// multiple of 8), each strip of V used by every active head, two heads at a time, while it is
// in L1.
template <class V>
MSA_ALWAYS_INLINE void pv_block(float* acc, const float* w, int64_t w_ld, const float* alpha,
                                const float* active, int64_t nh, const float* v, int64_t dp,
                                int64_t n) {
  constexpr int kLanes = static_cast<int>(sizeof(V) / sizeof(float));
  for (int64_t e0 = 0; e0 < dp; e0 += 16) {
    const bool wide = e0 + 16 <= dp;
    float* pend_acc[2];
    const float* pend_w[2];
    float pend_alpha[2];
    int pending = 0;
    for (int64_t i = 0; i < nh; ++i) {
      if (active[i] == 0.0f) continue;
      pend_acc[pending] = acc + i * dp;
      pend_w[pending] = w + i * w_ld;
      pend_alpha[pending] = alpha[i];
      if (++pending < 2) continue;
      if (wide) {
        pv_cols<V, 2, 16 / kLanes>(pend_acc, pend_w, pend_alpha, v, dp, n, e0);
      } else {
        pv_cols<V, 2, 8 / kLanes>(pend_acc, pend_w, pend_alpha, v, dp, n, e0);
      }
      pending = 0;
    }
    if (pending == 0) continue;
    if (wide) {
      pv_cols<V, 1, 16 / kLanes>(pend_acc, pend_w, pend_alpha, v, dp, n, e0);
    } else {
      pv_cols<V, 1, 8 / kLanes>(pend_acc, pend_w, pend_alpha, v, dp, n, e0);
    }
  }
}

// Computes rows t, KV head g, q heads g * group + [h_begin, h_end).
template <class V>
MSA_ALWAYS_INLINE void attend(const Problem& p, int64_t t, int64_t g, int64_t h_begin,
                              int64_t h_end, float* scratch) {
  const int64_t d = p.head_dim(), dp = padded_dim(d), bs = p.block_size(), nh = h_end - h_begin;
  const int64_t kc = k_chunk_rows(bs);
  const float scale = p.scale();
  float* k_rows = scratch;
  float* v_rows = k_rows + kc * dp;
  float* qs = v_rows + bs * dp;
  float* acc = qs + p.group() * dp;
  float* scores = acc + p.group() * dp;
  float* m = scores + p.group() * bs;
  float* l = m + p.group();
  float* alpha = l + p.group();
  float* active = alpha + p.group();  // 1 for a head that takes part in the block's P.V update

  for (int64_t i = 0; i < nh; ++i) {
    m[i] = kNegInf;
    l[i] = 0.0f;
    std::fill(acc + i * dp, acc + (i + 1) * dp, 0.0f);
  }

  const RowInfo r = row_info(p, t);
  if (r.request >= 0 && r.pos >= 0) {
    // Zero padding columns (never written by the dequantisation below).
    if (dp != d) {
      for (int64_t j = 0; j < kc; ++j) std::fill(k_rows + j * dp + d, k_rows + (j + 1) * dp, 0.0f);
      for (int64_t j = 0; j < bs; ++j) std::fill(v_rows + j * dp + d, v_rows + (j + 1) * dp, 0.0f);
    }
    for (int64_t i = 0; i < nh; ++i) {
      const int64_t h = g * p.group() + h_begin + i;
      std::fill(qs + i * dp + d, qs + (i + 1) * dp, 0.0f);
      load_row(p.q.dtype, p.q.data, t * p.q.strides[0] + h * p.q.strides[1], d, qs + i * dp);
    }
    const int64_t own = r.pos / bs;
    int64_t blk = p.form == Form::kDense ? 0 : next_selected(p, g, t, -1);
    while (blk >= 0 && blk <= own) {
      const int64_t page = at(p.block_table, r.request, blk);
      const int64_t n = std::min(bs, r.pos + 1 - blk * bs);
      // Scores: K is dequantised kKeyChunk keys at a time, each chunk used by every head
      // while it is in L1.
      for (int64_t j0 = 0; j0 < n; j0 += kc) {
        const int64_t nc = std::min(kc, n - j0);
        load_block(p, p.kv.k, p.kv.k_scale, page, g, j0, nc, dp, k_rows);
        qk_block<V>(qs, k_rows, nh, nc, dp, scale, scores + j0, bs);
      }
      load_block(p, p.kv.v, p.kv.v_scale, page, g, 0, n, dp, v_rows);

      // Per head: block max, new running max and rescale factor; the scores are replaced by
      // the weights exp(s - m_new), summed into l in key order.
      for (int64_t i = 0; i < nh; ++i) {
        float* s = scores + i * bs;
        active[i] = 0.0f;
        float block_max = kNegInf;
        for (int64_t j = 0; j < n; ++j) {
          if (s[j] > block_max) block_max = s[j];
        }
        // A block whose scores are all -inf adds exp(-inf) = 0 to every sum.
        if (block_max == kNegInf) continue;
        const float m_new = std::max(m[i], block_max);
        alpha[i] = std::exp(m[i] - m_new);
        float li = alpha[i] != 1.0f ? l[i] * alpha[i] : l[i];
        for (int64_t j = 0; j < n; ++j) {
          s[j] = std::exp(s[j] - m_new);
          li += s[j];
        }
        l[i] = li;
        m[i] = m_new;
        active[i] = 1.0f;
      }
      // P.V: columns in strips, each strip of V used by every active head while it is in L1.
      pv_block<V>(acc, scores, bs, alpha, active, nh, v_rows, dp, n);
      blk = p.form == Form::kDense ? blk + 1 : next_selected(p, g, t, blk);
    }
  }

  for (int64_t i = 0; i < nh; ++i) {
    const int64_t h = g * p.group() + h_begin + i;
    const int64_t base = t * p.out.strides[0] + h * p.out.strides[1];
    const bool has_keys = l[i] > 0.0f;
    for (int64_t e = 0; e < d; ++e) {
      store(p.out.dtype, p.out.data, base + e, has_keys ? acc[i * dp + e] / l[i] : 0.0f);
    }
    if (p.lse.defined()) {
      p.lse.ptr<float>()[t * p.lse.strides[0] + h * p.lse.strides[1]] =
          has_keys ? m[i] + std::log(l[i]) : kNegInf;
    }
  }
}

void attend_baseline(const Problem& p, int64_t t, int64_t g, int64_t h_begin, int64_t h_end,
                     float* scratch) {
  attend<F4>(p, t, g, h_begin, h_end, scratch);
}

// MSA_CPU_NO_AVX2 builds the baseline kernel only (to test it on an AVX2 machine).
#if defined(__GNUC__) && defined(__x86_64__) && !defined(MSA_CPU_NO_AVX2)
#define MSA_HAVE_AVX2_PATH 1
__attribute__((target("avx2"))) void attend_avx2(const Problem& p, int64_t t, int64_t g,
                                                 int64_t h_begin, int64_t h_end, float* scratch) {
  attend<F8>(p, t, g, h_begin, h_end, scratch);
}
#endif

using AttendFn = void (*)(const Problem&, int64_t, int64_t, int64_t, int64_t, float*);

// The widest kernel the CPU runs; every choice computes the same bits.
AttendFn pick_attend() {
#if defined(MSA_HAVE_AVX2_PATH)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return attend_avx2;
#endif
  return attend_baseline;
}

Status run_problem(const Problem& p, Workspace workspace, const Stream& stream) {
  size_t per_thread = 0;
  MSA_RETURN_IF_ERROR(
      scratch_bytes_per_thread(p.block_size(), p.head_dim(), p.group(), &per_thread));
  MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, per_thread * detail::kMaxThreads));
  MSA_RETURN_IF_ERROR(validate_values(p));

  // Slicing head groups only when there are fewer (row, KV head) pairs than threads keeps
  // every thread busy in small decode batches; it does not change any head's arithmetic.
  const int64_t pairs = p.num_rows() * p.num_kv_heads();
  if (pairs == 0) return Status::Ok();
  const int64_t threads = detail::resolve_threads(stream);
  const int64_t slices = std::clamp<int64_t>(ceil_div(threads, pairs), 1, p.group());
  char* ws = static_cast<char*>(workspace.data);
  const AttendFn attend_fn = pick_attend();
  return detail::parallel_for(pairs * slices, stream, [&](int64_t begin, int64_t end, int thread) {
    float* scratch = reinterpret_cast<float*>(ws + per_thread * static_cast<size_t>(thread));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t slice = item % slices;
      const int64_t pair = item / slices;
      attend_fn(p, pair / p.num_kv_heads(), pair % p.num_kv_heads(), slice * p.group() / slices,
                (slice + 1) * p.group() / slices, scratch);
    }
  });
}

}  // namespace

Status workspace_size(const SparseAttentionDecodeArgs& args, size_t* bytes) {
  return workspace_bytes(args.q, args.kv_cache, bytes);
}

Status run(const SparseAttentionDecodeArgs& args, Workspace workspace, Stream stream) {
  return run_problem(detail::attention_problem(args), workspace, stream);
}

Status workspace_size(const SparseAttentionPrefillArgs& args, size_t* bytes) {
  return workspace_bytes(args.q, args.kv_cache, bytes);
}

Status run(const SparseAttentionPrefillArgs& args, Workspace workspace, Stream stream) {
  return run_problem(detail::attention_problem(args), workspace, stream);
}

Status workspace_size(const DenseAttentionArgs& args, size_t* bytes) {
  return workspace_bytes(args.q, args.kv_cache, bytes);
}

Status run(const DenseAttentionArgs& args, Workspace workspace, Stream stream) {
  return run_problem(detail::attention_problem(args), workspace, stream);
}

}  // namespace cpu
}  // namespace msa
