// Shared fixtures of the attention and page-16 op tests: paged KV caches in every layout and
// scale mode, batches of decode / prefill rows with shuffled block tables and top-k lists, the
// runner, and the comparison with the float64 oracle (and, on CUDA, with the CPU backend).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/paging.h"
#include "common/test_tensor.h"
#include "msa/attention.h"
#include "msa/cache.h"
#include "msa/dtype.h"
#include "oracle/attention_oracle.h"

namespace msa {
namespace test {
namespace attn {

// Block-table entries beyond a request's used blocks: out of range on purpose, so reading or
// validating them fails the test.
constexpr int32_t kStaleEntry = -777;
// Top-k entries of padded rows and of rows past T: out of range on purpose (never read).
constexpr int32_t kStaleTopk = 77777;

enum class Layout { kPacked, kSplitNhd, kSplitHnd };
enum class Form { kDecode, kPrefill, kDense };

class DeviceBuffer {
 public:
  DeviceBuffer(const Device& device, size_t bytes)
      : device_(device), data_(bytes ? device_alloc(device, bytes) : nullptr), bytes_(bytes) {}
  ~DeviceBuffer() {
    if (data_ != nullptr) device_free(device_, data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  Workspace workspace() const { return Workspace{data_, bytes_}; }

 private:
  Device device_;
  void* data_;
  size_t bytes_;
};

// Queries the workspace, allocates it on `device` and runs the op.
template <typename Args>
Status run_op(const Args& args, const Device& device, Stream stream = Stream{}) {
  size_t bytes = 0;
  const Status ws = workspace_size(args, &bytes);
  if (!ws.ok()) return run(args, Workspace{}, stream);
  DeviceBuffer buffer(device, bytes);
  return run(args, buffer.workspace(), stream);
}

struct CacheSpec {
  Layout layout = Layout::kPacked;
  DType dtype = DType::kBF16;
  KvScaleMode mode = KvScaleMode::kNone;
  int64_t num_blocks = 0, num_kv_heads = 1, block_size = 128, head_dim = 128;
  double layer_k_scale = 0.25, layer_v_scale = 0.5;  // per-layer mode
  // Per-token-head mode: scales in [token_scale_lo, token_scale_hi), uniform or log-uniform.
  double token_scale_lo = 0.05, token_scale_hi = 0.5;
  bool token_scale_log = false;
  // Values drawn in logical order (page, KV head, slot, K then V, dim) instead of storage order:
  // caches of different layouts and the same seed then hold the same values.
  bool logical_fill = false;
};

// A main KV cache with random contents (bf16/f16 in [-1, 1), e4m3 stored values in [-4, 4))
// and scales: per-layer the spec's (k 0.25, v 0.5 by default); per-token-head random in
// [0.05, 0.5) by default.
class KvCacheFixture {
 public:
  KvCacheFixture(const CacheSpec& spec, const Device& device, uint64_t seed) : spec_(spec) {
    const int64_t nb = spec.num_blocks, hkv = spec.num_kv_heads, bs = spec.block_size,
                  d = spec.head_dim;
    switch (spec.layout) {
      case Layout::kPacked:
        storage_ = TestTensor(spec.dtype, {nb, hkv, bs, 2 * d}, device);
        break;
      case Layout::kSplitNhd:
        storage_ = TestTensor(spec.dtype, {nb, 2, bs, hkv, d}, device);
        break;
      case Layout::kSplitHnd:
        storage_ = TestTensor(spec.dtype, {nb, 2, bs, hkv, d},
                              {2 * hkv * bs * d, hkv * bs * d, d, bs * d, 1}, nb * 2 * hkv * bs * d,
                              device);
        break;
    }
    std::mt19937_64 rng(seed);
    const double range = spec.dtype == DType::kE4M3 ? 4.0 : 1.0;
    if (spec.logical_fill) {
      std::uniform_real_distribution<double> value(-range, range);
      for (int64_t p = 0; p < nb; ++p) {
        for (int64_t g = 0; g < hkv; ++g) {
          for (int64_t t = 0; t < bs; ++t) {
            for (int64_t s = 0; s < 2; ++s) {
              for (int64_t e = 0; e < d; ++e)
                storage_.set(storage_index(s, p, g, t, e), value(rng));
            }
          }
        }
      }
    } else {
      storage_.fill_uniform(rng, -range, range);
    }
    storage_.upload();
    if (spec.mode == KvScaleMode::kPerLayer) {
      k_scale_ = TestTensor(DType::kF32, {1}, device);
      v_scale_ = TestTensor(DType::kF32, {1}, device);
      k_scale_.set_flat(0, spec.layer_k_scale);
      v_scale_.set_flat(0, spec.layer_v_scale);
    } else if (spec.mode == KvScaleMode::kPerTokenHead) {
      k_scale_ = TestTensor(DType::kF32, {hkv, nb * bs}, device);
      v_scale_ = TestTensor(DType::kF32, {hkv, nb * bs}, device);
      if (spec.token_scale_log) {
        std::uniform_real_distribution<double> log_scale(std::log(spec.token_scale_lo),
                                                         std::log(spec.token_scale_hi));
        k_scale_.generate([&] { return std::exp(log_scale(rng)); });
        v_scale_.generate([&] { return std::exp(log_scale(rng)); });
      } else {
        k_scale_.fill_uniform(rng, spec.token_scale_lo, spec.token_scale_hi);
        v_scale_.fill_uniform(rng, spec.token_scale_lo, spec.token_scale_hi);
      }
    }
    if (spec.mode != KvScaleMode::kNone) {
      k_scale_.upload();
      v_scale_.upload();
    }
  }

  const CacheSpec& spec() const { return spec_; }

  // NaN in K, V and (per-token-head) their scales of slots [t_begin, block_size) of page `page`,
  // every KV head: what an unwritten slot past a request's length may hold. No key there is
  // visible, so no output may change.
  void poison_tail(int64_t page, int64_t t_begin) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const int64_t d = spec_.head_dim;
    auto at = [&](int64_t s, int64_t g, int64_t t, int64_t e) {
      return storage_index(s, page, g, t, e);
    };
    for (int64_t g = 0; g < spec_.num_kv_heads; ++g) {
      for (int64_t t = t_begin; t < spec_.block_size; ++t) {
        for (int64_t s = 0; s < 2; ++s) {
          for (int64_t e = 0; e < d; ++e) storage_.set(at(s, g, t, e), nan);
        }
        if (spec_.mode == KvScaleMode::kPerTokenHead) {
          k_scale_.set({g, page * spec_.block_size + t}, nan);
          v_scale_.set({g, page * spec_.block_size + t}, nan);
        }
      }
    }
    EXPECT_TRUE(
        std::isnan(storage_.get(at(1, spec_.num_kv_heads - 1, spec_.block_size - 1, d - 1))))
        << "the stored dtype keeps NaN";
    storage_.upload();
    if (spec_.mode == KvScaleMode::kPerTokenHead) {
      k_scale_.upload();
      v_scale_.upload();
    }
  }

  // Per-token-head mode: sets the V scale of every (KV head g, slot) to f(g, slot) and uploads
  // the scales.
  template <typename F>
  void set_v_token_scales(F f) {
    ASSERT_EQ(spec_.mode, KvScaleMode::kPerTokenHead);
    for (int64_t g = 0; g < spec_.num_kv_heads; ++g) {
      for (int64_t slot = 0; slot < spec_.num_blocks * spec_.block_size; ++slot) {
        v_scale_.set({g, slot}, f(g, slot));
      }
    }
    v_scale_.upload();
  }

  // The device view with the given scale mode (the fixture's own by default).
  KvCacheView view() const { return view_with_mode(spec_.mode); }
  KvCacheView view_with_mode(KvScaleMode mode) const {
    KvCacheView v;
    const Status st = spec_.layout == Layout::kPacked ? make_packed_kv_cache(storage_.view(), &v)
                                                      : make_split_kv_cache(storage_.view(), &v);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (mode != KvScaleMode::kNone) {
      const Status sc = set_kv_scales(&v, mode, k_scale_.view(), v_scale_.view());
      EXPECT_TRUE(sc.ok()) << sc.to_string();
    }
    return v;
  }

  // Dequantised values under the given scale mode.
  oracle::KvValues values() const { return values_with_mode(spec_.mode); }
  oracle::KvValues values_with_mode(KvScaleMode mode) const {
    oracle::KvValues kv;
    kv.num_blocks = spec_.num_blocks;
    kv.num_kv_heads = spec_.num_kv_heads;
    kv.block_size = spec_.block_size;
    kv.head_dim = spec_.head_dim;
    const size_t n =
        static_cast<size_t>(kv.num_blocks * kv.num_kv_heads * kv.block_size * kv.head_dim);
    kv.k.resize(n);
    kv.v.resize(n);
    for (int64_t p = 0; p < kv.num_blocks; ++p) {
      for (int64_t g = 0; g < kv.num_kv_heads; ++g) {
        for (int64_t t = 0; t < kv.block_size; ++t) {
          const int64_t slot = p * kv.block_size + t;
          double ks = 1.0, vs = 1.0;
          if (mode == KvScaleMode::kPerLayer) {
            ks = k_scale_.get_flat(0);
            vs = v_scale_.get_flat(0);
          } else if (mode == KvScaleMode::kPerTokenHead) {
            ks = k_scale_.get({g, slot});
            vs = v_scale_.get({g, slot});
          }
          for (int64_t e = 0; e < kv.head_dim; ++e) {
            kv.k[kv.index(p, g, t, e)] = stored(0, p, g, t, e) * ks;
            kv.v[kv.index(p, g, t, e)] = stored(1, p, g, t, e) * vs;
          }
        }
      }
    }
    return kv;
  }

 private:
  // Storage index of element e of side s (0 = K, 1 = V) of KV head g, slot t of page p.
  std::vector<int64_t> storage_index(int64_t s, int64_t p, int64_t g, int64_t t, int64_t e) const {
    return spec_.layout == Layout::kPacked ? std::vector<int64_t>{p, g, t, s * spec_.head_dim + e}
                                           : std::vector<int64_t>{p, s, t, g, e};
  }

  // Stored element of side s (0 = K, 1 = V) read through the layout's strides.
  double stored(int s, int64_t p, int64_t g, int64_t t, int64_t e) const {
    const std::vector<int64_t>& st = storage_.strides();
    int64_t off = 0;
    if (spec_.layout == Layout::kPacked) {
      off = p * st[0] + g * st[1] + t * st[2] + (s * spec_.head_dim + e) * st[3];
    } else {
      off = p * st[0] + s * st[1] + t * st[2] + g * st[3] + e * st[4];
    }
    const uint8_t* bytes = storage_.host_bytes().data();
    switch (spec_.dtype) {
      case DType::kE4M3:
        return e4m3_to_float(bytes[off]);
      case DType::kF16: {
        uint16_t b;
        std::memcpy(&b, bytes + 2 * off, 2);
        return f16_to_float(b);
      }
      default: {
        uint16_t b;
        std::memcpy(&b, bytes + 2 * off, 2);
        return bf16_to_float(b);
      }
    }
  }

  CacheSpec spec_;
  TestTensor storage_, k_scale_, v_scale_;
};

struct BatchSpec {
  Form form = Form::kDecode;
  int64_t num_q_heads = 16, num_kv_heads = 1, head_dim = 128, block_size = 128;
  int query_len = 1;                // decode
  std::vector<int64_t> seq_lens;    // per request (0 = padded decode request)
  std::vector<int64_t> query_lens;  // prefill / dense: rows of each request
  int64_t padding_rows = 0;         // prefill / dense: rows past cu_seqlens_q[B]
  int64_t topk_width = 16;
  int64_t topk_extra_rows = 0;    // rows of topk past T
  bool topk_all_visible = false;  // every visible block listed (needs nvb <= topk_width)
  bool own_block = true;          // the row's own block is always selected
  bool shared_pages = false;      // used table entries drawn with repetition from 24 pages
  bool nan_past_len = false;      // NaN in the slots of each request's last page past its length
  bool logical_kv_fill = false;   // cache values independent of the layout (logical_fill)
  Layout layout = Layout::kPacked;
  DType cache_dtype = DType::kBF16;
  KvScaleMode scale_mode = KvScaleMode::kNone;
  double layer_k_scale = 0.25, layer_v_scale = 0.5;    // per-layer scale values
  double token_scale_lo = 0.05, token_scale_hi = 0.5;  // per-token-head scale range
  bool token_scale_log = false;                        // ... drawn log-uniform
  DType q_dtype = DType::kBF16, out_dtype = DType::kF32;
  double q_range = 2.0;  // q uniform in [-q_range, q_range)
  bool with_lse = true;
  float softmax_scale = 0.0f;
  uint64_t seed = 1;
};

// All tensors of one attention call on one device, plus the host copies the oracle reads.
struct Batch {
  BatchSpec spec;
  Device device;
  int64_t rows = 0, max_blocks = 0;
  std::vector<int64_t> row_request, row_pos, cu;
  std::vector<int32_t> block_table_host, topk_host;
  std::unique_ptr<KvCacheFixture> cache;
  TestTensor q, block_table, seq_lens, cu_seqlens, topk, out, lse, flags;

  int64_t topk_rows() const { return rows + spec.topk_extra_rows; }
};

inline std::unique_ptr<Batch> make_batch(const BatchSpec& spec, const Device& device) {
  auto b = std::make_unique<Batch>();
  b->spec = spec;
  b->device = device;
  const int64_t bs = spec.block_size, nr = static_cast<int64_t>(spec.seq_lens.size());
  if (spec.form == Form::kDecode) {
    b->rows = nr * spec.query_len;
    b->row_pos = decode_positions(spec.seq_lens, spec.query_len);
    for (int64_t t = 0; t < b->rows; ++t) b->row_request.push_back(t / spec.query_len);
  } else {
    b->cu.push_back(0);
    for (int64_t q : spec.query_lens) b->cu.push_back(b->cu.back() + q);
    b->rows = b->cu.back() + spec.padding_rows;
    b->row_pos = prefill_positions(b->cu, spec.seq_lens, b->rows);
    b->row_request.assign(static_cast<size_t>(b->rows), -1);
    for (int64_t r = 0; r < nr; ++r) {
      for (int64_t t = b->cu[r]; t < b->cu[r + 1]; ++t) b->row_request[t] = r;
    }
  }

  int64_t used_total = 0;
  for (int64_t s : spec.seq_lens) {
    used_total += ceil_div(s, bs);
    b->max_blocks = std::max(b->max_blocks, ceil_div(s, bs) + 2);
  }
  CacheSpec cs;
  cs.layout = spec.layout;
  cs.dtype = spec.cache_dtype;
  cs.mode = spec.scale_mode;
  cs.layer_k_scale = spec.layer_k_scale;
  cs.layer_v_scale = spec.layer_v_scale;
  cs.token_scale_lo = spec.token_scale_lo;
  cs.token_scale_hi = spec.token_scale_hi;
  cs.token_scale_log = spec.token_scale_log;
  cs.logical_fill = spec.logical_kv_fill;
  cs.num_kv_heads = spec.num_kv_heads;
  cs.block_size = bs;
  cs.head_dim = spec.head_dim;
  cs.num_blocks = spec.shared_pages ? 24 : used_total + 3;
  b->cache = std::make_unique<KvCacheFixture>(cs, device, spec.seed * 4 + 1);

  std::mt19937_64 bt_rng(spec.seed * 4 + 2);
  if (spec.shared_pages) {
    b->block_table_host.assign(static_cast<size_t>(nr * b->max_blocks), kStaleEntry);
    std::uniform_int_distribution<int32_t> page(0, static_cast<int32_t>(cs.num_blocks - 1));
    for (int64_t r = 0; r < nr; ++r) {
      for (int64_t j = 0; j < ceil_div(spec.seq_lens[r], bs); ++j) {
        b->block_table_host[r * b->max_blocks + j] = page(bt_rng);
      }
    }
  } else {
    b->block_table_host =
        shuffled_block_table(spec.seq_lens, b->max_blocks, cs.num_blocks, bs, bt_rng, kStaleEntry);
  }
  if (spec.nan_past_len) {
    EXPECT_FALSE(spec.shared_pages) << "nan_past_len needs pages of one request each";
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t len = spec.seq_lens[r];
      if (len % bs == 0) continue;
      b->cache->poison_tail(b->block_table_host[r * b->max_blocks + (len - 1) / bs], len % bs);
    }
  }
  b->block_table = TestTensor(DType::kI32, {nr, b->max_blocks}, device);
  for (size_t i = 0; i < b->block_table_host.size(); ++i) {
    b->block_table.set_flat(static_cast<int64_t>(i), b->block_table_host[i]);
  }
  b->seq_lens = TestTensor(DType::kI32, {nr}, device);
  for (int64_t r = 0; r < nr; ++r) b->seq_lens.set_flat(r, static_cast<double>(spec.seq_lens[r]));
  b->cu_seqlens = TestTensor(DType::kI32, {nr + 1}, device);
  for (size_t i = 0; i < b->cu.size(); ++i) {
    b->cu_seqlens.set_flat(static_cast<int64_t>(i), static_cast<double>(b->cu[i]));
  }

  std::mt19937_64 q_rng(spec.seed * 4 + 3);
  b->q = TestTensor(spec.q_dtype, {b->rows, spec.num_q_heads, spec.head_dim}, device);
  b->q.fill_uniform(q_rng, -spec.q_range, spec.q_range);

  std::mt19937_64 topk_rng(spec.seed * 4 + 4);
  const int64_t k = spec.topk_width, trows = b->topk_rows();
  b->topk_host.assign(static_cast<size_t>(spec.num_kv_heads * trows * k), kStaleTopk);
  for (int64_t g = 0; g < spec.num_kv_heads; ++g) {
    for (int64_t t = 0; t < b->rows; ++t) {
      int32_t* row = &b->topk_host[(g * trows + t) * k];
      if (b->row_request[t] < 0 || b->row_pos[t] < 0) continue;
      const int64_t own = b->row_pos[t] / bs;
      std::vector<int32_t> ids;
      if (spec.topk_all_visible) {
        EXPECT_LE(own + 1, k) << "topk_all_visible needs every visible block to fit";
        for (int64_t blk = 0; blk <= own; ++blk) ids.push_back(static_cast<int32_t>(blk));
      } else {
        std::vector<int32_t> pool;
        for (int64_t blk = 0; blk < own; ++blk) pool.push_back(static_cast<int32_t>(blk));
        std::shuffle(pool.begin(), pool.end(), topk_rng);
        const int64_t others = std::min<int64_t>(spec.own_block ? k - 1 : k, own);
        ids.assign(pool.begin(), pool.begin() + others);
        if (spec.own_block) ids.push_back(static_cast<int32_t>(own));
        std::sort(ids.begin(), ids.end());
      }
      for (int64_t i = 0; i < k; ++i) row[i] = i < static_cast<int64_t>(ids.size()) ? ids[i] : -1;
    }
  }
  b->topk = TestTensor(DType::kI32, {spec.num_kv_heads, trows, k}, device);
  for (size_t i = 0; i < b->topk_host.size(); ++i) {
    b->topk.set_flat(static_cast<int64_t>(i), b->topk_host[i]);
  }

  b->out = TestTensor(spec.out_dtype, {b->rows, spec.num_q_heads, spec.head_dim}, device);
  if (spec.with_lse) b->lse = TestTensor(DType::kF32, {b->rows, spec.num_q_heads}, device);
  b->flags = TestTensor(DType::kI32, {1}, device);
  for (TestTensor* t : {&b->block_table, &b->seq_lens, &b->cu_seqlens, &b->q, &b->topk, &b->flags})
    t->upload();
  return b;
}

// Rewrites the top-k of (kv head g, row t) on the host and the device.
inline void set_topk_row(Batch& b, int64_t g, int64_t t, const std::vector<int32_t>& ids) {
  const int64_t k = b.spec.topk_width;
  for (int64_t i = 0; i < k; ++i) {
    const int32_t id = i < static_cast<int64_t>(ids.size()) ? ids[i] : -1;
    b.topk_host[(g * b.topk_rows() + t) * k + i] = id;
    b.topk.set({g, t, i}, id);
  }
  b.topk.upload();
}

inline SparseAttentionDecodeArgs decode_args(const Batch& b) {
  SparseAttentionDecodeArgs a;
  a.query_len = b.spec.query_len;
  a.softmax_scale = b.spec.softmax_scale;
  a.q = b.q.view();
  a.kv_cache = b.cache->view();
  a.block_table = b.block_table.view();
  a.seq_lens = b.seq_lens.view();
  a.topk = b.topk.view();
  a.out = b.out.view();
  if (b.spec.with_lse) a.lse = b.lse.view();
  a.error_flags = b.flags.view();
  return a;
}

inline SparseAttentionPrefillArgs prefill_args(const Batch& b) {
  SparseAttentionPrefillArgs a;
  a.softmax_scale = b.spec.softmax_scale;
  a.q = b.q.view();
  a.kv_cache = b.cache->view();
  a.block_table = b.block_table.view();
  a.cu_seqlens_q = b.cu_seqlens.view();
  a.seq_lens = b.seq_lens.view();
  a.topk = b.topk.view();
  a.out = b.out.view();
  if (b.spec.with_lse) a.lse = b.lse.view();
  a.error_flags = b.flags.view();
  return a;
}

inline DenseAttentionArgs dense_args(const Batch& b) {
  DenseAttentionArgs a;
  a.softmax_scale = b.spec.softmax_scale;
  a.q = b.q.view();
  a.kv_cache = b.cache->view();
  a.block_table = b.block_table.view();
  a.cu_seqlens_q = b.cu_seqlens.view();
  a.seq_lens = b.seq_lens.view();
  a.out = b.out.view();
  if (b.spec.with_lse) a.lse = b.lse.view();
  a.error_flags = b.flags.view();
  return a;
}

// Poisons the outputs (NaN bytes, so every element must be written), runs the batch's form and
// downloads the outputs and flags.
inline Status run_batch(Batch& b, Stream stream = Stream{}) {
  b.out.poison_device();
  if (b.spec.with_lse) b.lse.poison_device();
  Status st;
  switch (b.spec.form) {
    case Form::kDecode:
      st = run_op(decode_args(b), b.device, stream);
      break;
    case Form::kPrefill:
      st = run_op(prefill_args(b), b.device, stream);
      break;
    case Form::kDense:
      st = run_op(dense_args(b), b.device, stream);
      break;
  }
  b.out.download();
  if (b.spec.with_lse) b.lse.download();
  b.flags.download();
  return st;
}

inline double resolved_scale(const BatchSpec& s) {
  return s.softmax_scale != 0.0f ? static_cast<double>(s.softmax_scale)
                                 : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
}

inline oracle::AttentionBatch oracle_batch(const Batch& b) {
  oracle::AttentionBatch ob;
  ob.num_q_heads = b.spec.num_q_heads;
  ob.num_kv_heads = b.spec.num_kv_heads;
  ob.head_dim = b.spec.head_dim;
  ob.scale = resolved_scale(b.spec);
  ob.row_request = b.row_request;
  ob.row_pos = b.row_pos;
  ob.seq_lens = b.spec.seq_lens;
  ob.block_table = b.block_table_host;
  ob.max_blocks = b.max_blocks;
  ob.sparse = b.spec.form != Form::kDense;
  ob.topk = b.topk_host;
  ob.topk_rows = b.topk_rows();
  ob.topk_width = b.spec.topk_width;
  return ob;
}

inline std::vector<double> q_values(const Batch& b) {
  std::vector<double> q(static_cast<size_t>(b.q.numel()));
  for (int64_t i = 0; i < b.q.numel(); ++i) q[i] = b.q.get_flat(i);
  return q;
}

// NaN entries (nan_past_len's slots, never visible) do not count: the comparison is false.
inline double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Relative rounding error of one final rounding to the output dtype: at most one ulp of the
// dtype (bf16 2^-8, f16 2^-10 relative), none for f32.
inline double rounding_rel(DType out) {
  return out == DType::kBF16 ? std::ldexp(1.0, -8) : out == DType::kF16 ? std::ldexp(1.0, -10) : 0;
}

// Absolute error budget of the fp32 computation relative to max|v|. CPU: fp32 scores and online
// softmax over <= a few thousand keys stay within ~1e-5 of max|v| (accumulated fp32 rounding,
// observed ~1e-6). CUDA: kernels may round dequantised K/V and the probabilities to bf16 for the
// tensor-core MMAs (spec B4.4), ~2^-9 relative per operand, so allow 8e-3 of max|v|.
inline double compute_abs_rel(const Device& device) { return device.is_cuda() ? 8e-3 : 1e-5; }
// lse tolerance. CPU: fp32 log of an fp32 sum. CUDA: the kernels round q (f32 or f16 inputs too)
// and K to bf16 for the MMA, which moves every logit by up to ~2^-8 of |scale * q| * |k|, i.e.
// a few 1e-3 absolute for unit-variance data at D = 128 (observed 2.9e-3 on the H200); lse
// inherits that shift, so allow the same 8e-3 budget as the outputs.
inline double lse_tol(const Device& device, double lse) {
  return device.is_cuda() ? 8e-3 * (1.0 + std::fabs(lse)) : 2e-5 * (1.0 + std::fabs(lse));
}

// Compares the downloaded outputs of `b` with `want` (oracle, or another backend's outputs as
// doubles). Rows without keys must be exactly 0 with lse -inf.
inline void expect_outputs_near(const Batch& b, const oracle::AttentionResult& want, double max_v,
                                const Device& tol_device, const std::string& what) {
  const double abs_tol = compute_abs_rel(tol_device) * max_v + 1e-7;
  const double rel = rounding_rel(b.spec.out_dtype);
  int64_t bad = 0;
  for (int64_t i = 0; i < b.out.numel(); ++i) {
    const double got = b.out.get_flat(i), ref = want.out[i];
    if (!(std::fabs(got - ref) <= abs_tol + rel * std::fabs(ref)) && bad++ < 5) {
      ADD_FAILURE() << what << ": out flat " << i << " (row "
                    << i / (b.spec.num_q_heads * b.spec.head_dim) << ") got " << got << " want "
                    << ref;
    }
  }
  if (b.spec.with_lse) {
    for (int64_t i = 0; i < b.lse.numel(); ++i) {
      const double got = b.lse.get_flat(i), ref = want.lse[i];
      const bool ok = std::isinf(ref) ? (std::isinf(got) && got < 0)
                                      : std::fabs(got - ref) <= lse_tol(tol_device, ref);
      if (!ok && bad++ < 10) {
        ADD_FAILURE() << what << ": lse flat " << i << " got " << got << " want " << ref;
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": mismatching elements";
}

inline oracle::AttentionResult outputs_as_result(const Batch& b) {
  oracle::AttentionResult r;
  for (int64_t i = 0; i < b.out.numel(); ++i) r.out.push_back(b.out.get_flat(i));
  if (b.spec.with_lse) {
    for (int64_t i = 0; i < b.lse.numel(); ++i) r.lse.push_back(b.lse.get_flat(i));
  }
  return r;
}

inline bool same_bytes(const TestTensor& a, const TestTensor& b) {
  return a.host_bytes() == b.host_bytes();
}

// The standard case: run on the test device, compare with the oracle; on CUDA also run the
// CPU backend on the same inputs and compare with it.
inline void check_against_oracle(const BatchSpec& spec) {
  std::unique_ptr<Batch> b = make_batch(spec, test_device());
  const Status st = run_batch(*b);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(b->flags.get_flat(0), 0);
  const oracle::KvValues kv = b->cache->values();
  const double max_v = max_abs(kv.v);
  const oracle::AttentionResult want = oracle::attention(oracle_batch(*b), q_values(*b), kv);
  expect_outputs_near(*b, want, max_v, b->device, "oracle");
  if (b->device.is_cuda()) {
    std::unique_ptr<Batch> host = make_batch(spec, Device::cpu());
    const Status hs = run_batch(*host);
    ASSERT_TRUE(hs.ok()) << hs.to_string();
    expect_outputs_near(*b, outputs_as_result(*host), max_v, b->device, "cpu backend");
  }
}

}  // namespace attn
}  // namespace test
}  // namespace msa
