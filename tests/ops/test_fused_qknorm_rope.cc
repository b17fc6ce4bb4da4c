// Fused pre-attention op (spec A11, B5) against the float64 oracle, on the binary's test device
// (and, on CUDA, against the CPU backend on the same inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/test_tensor.h"
#include "msa/cache.h"
#include "msa/dtype.h"
#include "msa/fused_qknorm_rope.h"
#include "oracle/fused_oracle.h"

namespace msa {
namespace test {
namespace {

enum class Layout { kNone, kPacked, kSplitNhd, kSplitHnd };

struct FusedCase {
  int nq = 16, nkv = 1, niq = 1;
  int head_dim = 128, index_dim = 128, rotary_dim = 64;
  int tokens = 7;
  PreAttentionMode mode = PreAttentionMode::kSparse;
  DType act = DType::kBF16;
  DType weight_dtype = DType::kF32;
  DType cos_sin_dtype = DType::kF32;
  DType id_dtype = DType::kI64;   // positions and slot mappings
  int64_t qkv_row_pad = 0;        // extra elements between qkv rows
  bool dense_full_width = false;  // dense mode fed the 5-part sparse row
  bool q_out = false;
  bool q_out_3d = true;  // 3-D q_out uses a padded head stride
  bool index_q_out = false;
  DType index_q_out_dtype = DType::kBF16;
  Layout layout = Layout::kPacked;
  DType cache_dtype = DType::kBF16;
  KvScaleMode scale_mode = KvScaleMode::kNone;
  double layer_scale = 1.0;  // multiplies the per-layer K/V scales (small = saturating values)
  bool index_cache = true;
  DType index_cache_dtype = DType::kBF16;
  bool separate_index_slots = false;
  bool negative_slots = false;
  bool padding_rows = false;
  bool large_positions = false;  // positions near 1M, table built by the RopeCacheArgs op
  int cpu_threads = 0;
  uint64_t seed = 1;
};

constexpr int64_t kBlockSize = 16;

bool sparse_mode(const FusedCase& c) { return c.mode == PreAttentionMode::kSparse; }
// The index cache is written in sparse mode; skip-index calls pass it through untouched.
bool has_index_cache(const FusedCase& c) { return sparse_mode(c) && c.index_cache; }
bool passes_index_cache(const FusedCase& c) {
  return (sparse_mode(c) || c.mode == PreAttentionMode::kSkipIndex) && c.index_cache;
}
bool has_index_q_out(const FusedCase& c) { return sparse_mode(c) && c.index_q_out; }
bool full_width(const FusedCase& c) {
  return c.mode != PreAttentionMode::kDense || c.dense_full_width;
}
// Dense layers have no index weights; their index segments (if any) then have head_dim.
bool has_index_weights(const FusedCase& c) { return c.mode != PreAttentionMode::kDense; }
int index_dim_of(const FusedCase& c) { return has_index_weights(c) ? c.index_dim : c.head_dim; }

// Inputs and outputs of one call on one device, with the initial bytes of everything the op
// may modify in place.
struct Fixture {
  FusedCase c;
  Device device;
  int64_t width = 0, max_pos = 0, num_blocks = 0, index_num_blocks = 0;
  TestTensor qkv, positions, cos_sin, q_w, k_w, iq_w, ik_w, slots, index_slots;
  TestTensor kv_storage, k_scale, v_scale, index_cache, q_out, index_q_out, flags;
  KvCacheView kv;
  std::vector<uint8_t> qkv0, kv0, ic0;

  FusedQkNormRopeArgs args() const {
    FusedQkNormRopeArgs a;
    a.mode = c.mode;
    a.num_q_heads = c.nq;
    a.num_kv_heads = c.nkv;
    a.num_index_heads = c.niq;
    a.rotary_dim = c.rotary_dim;
    a.eps = 1e-6f;
    a.qkv = qkv.view();
    a.positions = positions.view();
    a.cos_sin_cache = cos_sin.view();
    a.q_norm_weight = q_w.view();
    a.k_norm_weight = k_w.view();
    if (has_index_weights(c)) {
      a.index_q_norm_weight = iq_w.view();
      a.index_k_norm_weight = ik_w.view();
    }
    if (c.layout != Layout::kNone) {
      a.slot_mapping = slots.view();
      a.kv_cache = kv;
    }
    if (passes_index_cache(c)) {
      a.index_cache = index_cache.view();
      if (c.separate_index_slots) a.index_slot_mapping = index_slots.view();
    }
    if (c.q_out) a.q_out = q_out.view();
    if (has_index_q_out(c)) a.index_q_out = index_q_out.view();
    a.error_flags = flags.view();
    return a;
  }

  // Poisons the separate outputs and snapshots their device contents as the initial bytes.
  void poison_outputs() {
    if (c.q_out) q_out.poison_device();
    if (has_index_q_out(c)) index_q_out.poison_device();
  }

  void download_all() {
    qkv.download();
    if (c.layout != Layout::kNone) kv_storage.download();
    if (passes_index_cache(c)) index_cache.download();
    if (c.q_out) q_out.download();
    if (has_index_q_out(c)) index_q_out.download();
    flags.download();
  }
};

TestTensor index_vector(DType t, const std::vector<int64_t>& v, Device device) {
  TestTensor out(t, {static_cast<int64_t>(v.size())}, device);
  for (size_t i = 0; i < v.size(); ++i)
    out.set({static_cast<int64_t>(i)}, static_cast<double>(v[i]));
  out.upload();
  return out;
}

std::vector<int64_t> shuffled_slots(int64_t count, std::mt19937_64& rng) {
  std::vector<int64_t> s(static_cast<size_t>(count));
  std::iota(s.begin(), s.end(), 0);
  std::shuffle(s.begin(), s.end(), rng);
  return s;
}

Fixture make_fixture(const FusedCase& c, Device device) {
  Fixture fx;
  fx.c = c;
  fx.device = device;
  std::mt19937_64 rng(c.seed);
  const int64_t T = c.tokens, D = c.head_dim, Di = index_dim_of(c);
  const int64_t base = (c.nq + 2LL * c.nkv) * D;
  fx.width = full_width(c) ? base + (c.niq + 1LL) * Di : base;

  const int64_t row_stride = fx.width + c.qkv_row_pad;
  fx.qkv = TestTensor(c.act, {T, fx.width}, {row_stride, 1}, T * row_stride, device);
  fx.qkv.fill_bytes(0x3C);  // row padding: a pattern the op must not touch
  fx.qkv.fill_uniform(rng, -2.0, 2.0);
  fx.qkv.upload();
  fx.qkv0 = fx.qkv.host_bytes();

  auto weight = [&](int64_t n) {
    TestTensor w(c.weight_dtype, {n}, device);
    w.fill_uniform(rng, -0.5, 0.5);
    w.upload();
    return w;
  };
  fx.q_w = weight(D);
  fx.k_w = weight(D);
  fx.iq_w = weight(Di);
  fx.ik_w = weight(Di);

  // Positions: random rows of a small table, or a run near 1M in a table built by the op.
  fx.max_pos = c.large_positions ? 1000064 : 512;
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::uniform_int_distribution<int64_t> pos_dist(0, fx.max_pos - 1);
  for (int64_t t = 0; t < T; ++t) {
    pos[t] = c.large_positions ? 1000000 + t : pos_dist(rng);
    if (c.padding_rows && t % 4 == 3) pos[t] = -1 - t;
  }
  fx.positions = index_vector(c.id_dtype, pos, device);

  fx.cos_sin = TestTensor(c.cos_sin_dtype, {fx.max_pos, c.rotary_dim}, device);
  if (c.large_positions) {
    RopeCacheArgs rope;
    rope.theta = 5e6;
    rope.cos_sin_out = fx.cos_sin.view();
    EXPECT_TRUE(run(rope, Workspace{}, Stream{}).ok());
    fx.cos_sin.download();
  } else {
    for (int64_t p = 0; p < fx.max_pos; ++p) {
      const std::vector<double> row = oracle::rope_row(5e6, c.rotary_dim, p);
      for (int i = 0; i < c.rotary_dim; ++i) fx.cos_sin.set({p, i}, row[static_cast<size_t>(i)]);
    }
    fx.cos_sin.upload();
  }

  // Distinct slots (a batch never writes one slot twice); padding rows get valid slots too, to
  // show they are ignored.
  fx.num_blocks = (2 * T + kBlockSize - 1) / kBlockSize + 1;
  fx.index_num_blocks = fx.num_blocks + 1;
  std::vector<int64_t> slots = shuffled_slots(fx.num_blocks * kBlockSize, rng);
  std::vector<int64_t> islots = shuffled_slots(fx.index_num_blocks * kBlockSize, rng);
  slots.resize(static_cast<size_t>(T));
  islots.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T && c.negative_slots; ++t) {
    if (t % 3 == 1) slots[t] = -1;
    if (t % 3 == 2) islots[t] = -3;
  }
  fx.slots = index_vector(c.id_dtype, slots, device);
  fx.index_slots = index_vector(c.id_dtype, islots, device);

  const int64_t nb = fx.num_blocks, H = c.nkv;
  switch (c.layout) {
    case Layout::kNone:
      break;
    case Layout::kPacked:
      fx.kv_storage = TestTensor(c.cache_dtype, {nb, H, kBlockSize, 2 * D}, device);
      break;
    case Layout::kSplitNhd:
      fx.kv_storage = TestTensor(c.cache_dtype, {nb, 2, kBlockSize, H, D}, device);
      break;
    case Layout::kSplitHnd:
      // Physical [nb, 2, H, bs, D] seen through the logical NHD shape.
      fx.kv_storage = TestTensor(c.cache_dtype, {nb, 2, kBlockSize, H, D},
                                 {2 * H * kBlockSize * D, H * kBlockSize * D, D, kBlockSize * D, 1},
                                 nb * 2 * H * kBlockSize * D, device);
      break;
  }
  if (c.layout != Layout::kNone) {
    fx.kv_storage.fill_uniform(rng, -1.0, 1.0);
    fx.kv_storage.upload();
    fx.kv0 = fx.kv_storage.host_bytes();
    const Status s = c.layout == Layout::kPacked
                         ? make_packed_kv_cache(fx.kv_storage.view(), &fx.kv)
                         : make_split_kv_cache(fx.kv_storage.view(), &fx.kv);
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (c.scale_mode == KvScaleMode::kPerLayer) {
      fx.k_scale = TestTensor(DType::kF32, {1}, device);
      fx.v_scale = TestTensor(DType::kF32, {1}, device);
      fx.k_scale.set({0}, 0.037 * c.layer_scale);
      fx.v_scale.set({0}, 0.021 * c.layer_scale);
    } else if (c.scale_mode == KvScaleMode::kPerTokenHead) {
      fx.k_scale = TestTensor(DType::kF32, {H, nb * kBlockSize}, device);
      fx.v_scale = TestTensor(DType::kF32, {H, nb * kBlockSize}, device);
      fx.k_scale.fill_uniform(rng, 0.01, 0.05);
      fx.v_scale.fill_uniform(rng, 0.005, 0.05);
    }
    if (c.scale_mode != KvScaleMode::kNone) {
      fx.k_scale.upload();
      fx.v_scale.upload();
      const Status ss = set_kv_scales(&fx.kv, c.scale_mode, fx.k_scale.view(), fx.v_scale.view());
      EXPECT_TRUE(ss.ok()) << ss.to_string();
    }
  }

  fx.index_cache = TestTensor(c.index_cache_dtype, {fx.index_num_blocks, kBlockSize, Di}, device);
  fx.index_cache.fill_uniform(rng, -1.0, 1.0);
  fx.index_cache.upload();
  fx.ic0 = fx.index_cache.host_bytes();

  if (c.q_out_3d) {
    const int64_t hs = D + 8;  // padded head stride: the op must honour strides
    fx.q_out = TestTensor(c.act, {T, c.nq, D}, {c.nq * hs, hs, 1}, T * c.nq * hs, device);
  } else {
    fx.q_out = TestTensor(c.act, {T, c.nq * D}, device);
  }
  fx.index_q_out = TestTensor(c.index_q_out_dtype, {T, c.niq, Di}, device);
  fx.flags = TestTensor(DType::kI32, {1}, device);
  fx.flags.upload();
  return fx;
}

Status run_fixture(const Fixture& fx, int threads) {
  const FusedQkNormRopeArgs args = fx.args();
  size_t bytes = 0;
  const Status ws = workspace_size(args, &bytes);
  if (!ws.ok()) return ws;
  TestTensor workspace(DType::kE4M3, {static_cast<int64_t>(bytes)}, fx.device);
  return run(args, Workspace{bytes ? workspace.view().data : nullptr, bytes},
             Stream{nullptr, threads});
}

double decode(DType t, const std::vector<uint8_t>& bytes, int64_t elem) {
  const uint8_t* p = bytes.data() + elem * dtype_size(t);
  uint16_t h = 0;
  switch (t) {
    case DType::kBF16:
      std::memcpy(&h, p, 2);
      return bf16_to_float(h);
    case DType::kF16:
      std::memcpy(&h, p, 2);
      return f16_to_float(h);
    case DType::kE4M3:
      return e4m3_to_float(*p);
    default:
      ADD_FAILURE() << "decode: unexpected dtype " << dtype_name(t);
      return 0.0;
  }
}

// Sign-magnitude bits as an integer that is monotonic in the value, so that neighbouring
// representable values differ by 1 (bf16, f16, e4m3 and f32).
int64_t ordinal(DType t, const std::vector<uint8_t>& bytes, int64_t elem) {
  const uint8_t* p = bytes.data() + elem * dtype_size(t);
  if (t == DType::kE4M3) return (*p & 0x80) ? -int64_t{*p & 0x7F} : int64_t{*p};
  if (t == DType::kF32) {
    uint32_t u = 0;
    std::memcpy(&u, p, 4);
    return (u & 0x80000000u) ? -int64_t{u & 0x7FFFFFFFu} : int64_t{u};
  }
  uint16_t h = 0;
  std::memcpy(&h, p, 2);
  return (h & 0x8000) ? -int64_t{h & 0x7FFF} : int64_t{h};
}

// Whether the stored element is the float64 `want` rounded to `t`, within the tolerance:
// the op computes in fp32 and rounds once, so the stored value is at most half an ulp from the
// fp32 result, and fp32 error (~1e-6 on O(1) values, incl. RoPE cancellation) can move a value
// at a rounding midpoint to the other neighbour: allow 1 ulp relative (2^-7 bf16, 2^-10 f16)
// plus 1e-5 absolute. For e4m3 the op quantises from fp32 and the reference from fp64, which
// differ at a midpoint: allow 1 e4m3 ulp (one code step).
bool close_to(DType t, const std::vector<uint8_t>& bytes, int64_t elem, double want) {
  if (t == DType::kE4M3) {
    const std::vector<uint8_t> ref{float_to_e4m3(static_cast<float>(want))};
    return std::llabs(ordinal(t, bytes, elem) - ordinal(t, ref, 0)) <= 1;
  }
  const double rel = t == DType::kBF16 ? 0x1p-7 : 0x1p-10;
  return std::fabs(decode(t, bytes, elem) - want) <= rel * std::fabs(want) + 1e-5;
}

// Collects the elements an op is expected to write: each is checked against its reference and
// then adopted into a copy of the initial bytes, so that a final bytewise comparison proves
// that nothing else changed.
class Expectation {
 public:
  Expectation(std::string name, DType dtype, const std::vector<uint8_t>& initial,
              const std::vector<uint8_t>& actual)
      : name_(std::move(name)), dtype_(dtype), expected_(initial), actual_(actual) {}

  void value(int64_t elem, double want) {
    if (!close_to(dtype_, actual_, elem, want)) fail(elem, want);
    adopt(elem);
  }
  void zero(int64_t elem) {
    if (decode(dtype_, actual_, elem) != 0.0) fail(elem, 0.0);
    adopt(elem);
  }
  void finish() {
    ASSERT_EQ(expected_.size(), actual_.size());
    for (size_t i = 0; i < actual_.size(); ++i) {
      if (expected_[i] != actual_[i]) {
        ADD_FAILURE() << name_ << ": byte " << i << " changed although nothing should be "
                      << "written there (" << int{expected_[i]} << " -> " << int{actual_[i]} << ")";
        return;
      }
    }
  }

 private:
  void fail(int64_t elem, double want) {
    if (++failures_ <= 8) {
      ADD_FAILURE() << name_ << " element " << elem << ": got " << decode(dtype_, actual_, elem)
                    << ", want " << want;
    }
  }
  void adopt(int64_t elem) {
    const int64_t n = dtype_size(dtype_);
    std::memcpy(expected_.data() + elem * n, actual_.data() + elem * n, static_cast<size_t>(n));
  }

  std::string name_;
  DType dtype_;
  std::vector<uint8_t> expected_;
  const std::vector<uint8_t>& actual_;
  int failures_ = 0;
};

int64_t view_base(const TensorView& sub, const TestTensor& storage) {
  return (static_cast<const char*>(sub.data) - static_cast<const char*>(storage.view().data)) /
         dtype_size(storage.dtype());
}

int64_t out_elem(const TestTensor& out, int64_t t, int64_t h, int64_t dim, int64_t d) {
  const auto& s = out.strides();
  return out.shape().size() == 3 ? t * s[0] + h * s[1] + d : t * s[0] + h * dim + d;
}

double kv_divisor(const Fixture& fx, const TestTensor& scale, int64_t h, int64_t slot) {
  switch (fx.c.scale_mode) {
    case KvScaleMode::kNone:
      return 1.0;
    case KvScaleMode::kPerLayer:
      return scale.get({0});
    case KvScaleMode::kPerTokenHead:
      return scale.get({h, slot});
  }
  return 1.0;
}

// Compares everything the call may have modified with the oracle; the fixture is downloaded.
void verify(const Fixture& fx) {
  const FusedCase& c = fx.c;
  const int64_t D = c.head_dim, Di = index_dim_of(c), W = fx.width;
  const bool sparse = sparse_mode(c);
  const std::vector<uint8_t> poison_q(fx.q_out.host_bytes().size(), 0xFF);
  const std::vector<uint8_t> poison_iq(fx.index_q_out.host_bytes().size(), 0xFF);
  Expectation qkv("qkv", c.act, fx.qkv0, fx.qkv.host_bytes());
  Expectation q_out("q_out", c.act, poison_q, fx.q_out.host_bytes());
  Expectation iq_out("index_q_out", c.index_q_out_dtype, poison_iq, fx.index_q_out.host_bytes());
  Expectation kv("kv_cache", c.cache_dtype, fx.kv0, fx.kv_storage.host_bytes());
  Expectation ic("index_cache", c.index_cache_dtype, fx.ic0, fx.index_cache.host_bytes());

  oracle::FusedShape shape;
  shape.num_q_heads = c.nq;
  shape.num_kv_heads = c.nkv;
  shape.num_index_heads = c.niq;
  shape.head_dim = c.head_dim;
  shape.index_dim = static_cast<int>(Di);
  shape.rotary_dim = c.rotary_dim;
  shape.eps = static_cast<double>(1e-6f);
  auto values = [](const TestTensor& w) {
    std::vector<double> v(static_cast<size_t>(w.numel()));
    for (int64_t i = 0; i < w.numel(); ++i) v[static_cast<size_t>(i)] = w.get_flat(i);
    return v;
  };
  const std::vector<double> qw = values(fx.q_w), kw = values(fx.k_w);
  const std::vector<double> iqw = values(fx.iq_w), ikw = values(fx.ik_w);
  const int64_t k_base = fx.c.layout == Layout::kNone ? 0 : view_base(fx.kv.k, fx.kv_storage);
  const int64_t v_base = fx.c.layout == Layout::kNone ? 0 : view_base(fx.kv.v, fx.kv_storage);

  for (int64_t t = 0; t < c.tokens; ++t) {
    const int64_t p = static_cast<int64_t>(fx.positions.get({t}));
    if (p < 0) {
      for (int64_t h = 0; h < c.nq && c.q_out; ++h) {
        for (int64_t d = 0; d < D; ++d) q_out.zero(out_elem(fx.q_out, t, h, D, d));
      }
      for (int64_t h = 0; h < c.niq && has_index_q_out(c); ++h) {
        for (int64_t d = 0; d < Di; ++d) iq_out.zero(out_elem(fx.index_q_out, t, h, Di, d));
      }
      continue;
    }
    const int64_t row0 = t * fx.qkv.strides()[0];
    std::vector<double> row(static_cast<size_t>(W));
    for (int64_t j = 0; j < W; ++j) row[static_cast<size_t>(j)] = decode(c.act, fx.qkv0, row0 + j);
    std::vector<double> cs(static_cast<size_t>(c.rotary_dim));
    for (int i = 0; i < c.rotary_dim; ++i) cs[static_cast<size_t>(i)] = fx.cos_sin.get({p, i});
    const oracle::FusedTokenResult r =
        oracle::fused_token(shape, row, cs, qw, kw, iqw, ikw, sparse);

    for (int64_t h = 0; h < c.nq; ++h) {
      for (int64_t d = 0; d < D; ++d) {
        const double want = r.q[h][d];
        if (c.q_out) {
          q_out.value(out_elem(fx.q_out, t, h, D, d), want);
        } else {
          qkv.value(row0 + h * D + d, want);
        }
      }
    }
    for (int64_t h = 0; h < c.nkv; ++h) {
      for (int64_t d = 0; d < D; ++d) qkv.value(row0 + (c.nq + h) * D + d, r.k[h][d]);
    }
    if (sparse) {
      const int64_t iq0 = row0 + (c.nq + 2 * c.nkv) * D;
      for (int64_t h = 0; h < c.niq; ++h) {
        for (int64_t d = 0; d < Di; ++d) {
          if (c.index_q_out) {
            iq_out.value(out_elem(fx.index_q_out, t, h, Di, d), r.index_q[h][d]);
          } else {
            qkv.value(iq0 + h * Di + d, r.index_q[h][d]);
          }
        }
      }
      for (int64_t d = 0; d < Di; ++d) qkv.value(iq0 + c.niq * Di + d, r.index_k[d]);
    }

    const int64_t slot = c.layout == Layout::kNone ? -1 : static_cast<int64_t>(fx.slots.get({t}));
    if (slot >= 0) {
      const int64_t page = slot / kBlockSize, off = slot % kBlockSize;
      for (int64_t h = 0; h < c.nkv; ++h) {
        const double kd = kv_divisor(fx, fx.k_scale, h, slot);
        const double vd = kv_divisor(fx, fx.v_scale, h, slot);
        const TensorView& kk = fx.kv.k;
        const TensorView& vv = fx.kv.v;
        for (int64_t d = 0; d < D; ++d) {
          kv.value(k_base + page * kk.strides[0] + h * kk.strides[1] + off * kk.strides[2] + d,
                   r.k[h][d] / kd);
          kv.value(v_base + page * vv.strides[0] + h * vv.strides[1] + off * vv.strides[2] + d,
                   r.v[h][d] / vd);
        }
      }
    }
    if (has_index_cache(c)) {
      const TestTensor& ids = c.separate_index_slots ? fx.index_slots : fx.slots;
      const int64_t is = static_cast<int64_t>(ids.get({t}));
      if (is >= 0) {
        const auto& st = fx.index_cache.strides();
        for (int64_t d = 0; d < Di; ++d) {
          ic.value((is / kBlockSize) * st[0] + (is % kBlockSize) * st[1] + d, r.index_k[d]);
        }
      }
    }
  }
  qkv.finish();
  if (c.q_out) q_out.finish();
  if (has_index_q_out(c)) iq_out.finish();
  if (c.layout != Layout::kNone) kv.finish();
  if (c.index_cache) ic.finish();
  EXPECT_EQ(fx.flags.get({0}), 0.0) << "error_flags set by a valid call";
}

// Every element of two results of the same call within one unit in the last place: both
// backends compute in fp32 and round once, but their fp32 summation orders differ, which can
// flip a rounding at a midpoint.
void expect_within_one_ulp(const char* name, DType t, const std::vector<uint8_t>& a,
                           const std::vector<uint8_t>& b) {
  ASSERT_EQ(a.size(), b.size()) << name;
  const int64_t n = static_cast<int64_t>(a.size()) / dtype_size(t);
  int failures = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::llabs(ordinal(t, a, i) - ordinal(t, b, i)) > 1 && ++failures <= 8) {
      ADD_FAILURE() << name << " element " << i << ": " << decode(t, a, i) << " vs "
                    << decode(t, b, i);
    }
  }
}

void expect_same_results(const Fixture& a, const Fixture& b, bool bitwise) {
  const FusedCase& c = a.c;
  auto cmp = [&](const char* name, DType t, const TestTensor& x, const TestTensor& y) {
    if (bitwise) {
      EXPECT_TRUE(x.host_bytes() == y.host_bytes()) << name << " differs between runs";
    } else {
      expect_within_one_ulp(name, t, x.host_bytes(), y.host_bytes());
    }
  };
  cmp("qkv", c.act, a.qkv, b.qkv);
  if (c.layout != Layout::kNone) cmp("kv_cache", c.cache_dtype, a.kv_storage, b.kv_storage);
  if (has_index_cache(c)) cmp("index_cache", c.index_cache_dtype, a.index_cache, b.index_cache);
  if (c.q_out) cmp("q_out", c.act, a.q_out, b.q_out);
  if (has_index_q_out(c)) cmp("index_q_out", c.index_q_out_dtype, a.index_q_out, b.index_q_out);
}

Fixture run_on(const FusedCase& c, Device device, int threads) {
  Fixture fx = make_fixture(c, device);
  fx.poison_outputs();
  const Status s = run_fixture(fx, threads);
  EXPECT_TRUE(s.ok()) << s.to_string();
  fx.download_all();
  return fx;
}

// Runs the case on the test device, checks it against the oracle and, on CUDA, against the
// CPU backend on the same inputs.
void run_case(const FusedCase& c) {
  const Fixture fx = run_on(c, test_device(), c.cpu_threads);
  verify(fx);
  if (test_device().is_cuda()) {
    const Fixture cpu = run_on(c, Device::cpu(), c.cpu_threads);
    expect_same_results(fx, cpu, /*bitwise=*/false);
  }
}

FusedCase tp_case(int tp, int tokens) {
  FusedCase c;
  c.nq = 64 / tp;
  c.nkv = tp <= 4 ? 4 / tp : 1;
  c.niq = c.nkv;
  c.tokens = tokens;
  c.seed = static_cast<uint64_t>(tp * 100 + tokens);
  return c;
}

TEST(FusedQkNormRope, TpPresetsSparseWithInserts) {
  MSA_REQUIRE_TEST_DEVICE();
  for (const auto& [tp, tokens] :
       std::vector<std::pair<int, int>>{{1, 7}, {2, 33}, {4, 1}, {4, 33}, {8, 7}}) {
    SCOPED_TRACE("tp " + std::to_string(tp) + " tokens " + std::to_string(tokens));
    run_case(tp_case(tp, tokens));
  }
}

TEST(FusedQkNormRope, TpPresetsSeparateOutputs) {
  MSA_REQUIRE_TEST_DEVICE();
  for (int tp : {1, 2, 4, 8}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    FusedCase c = tp_case(tp, 5);
    c.q_out = true;
    c.q_out_3d = tp % 2 == 0;
    c.index_q_out = true;
    c.index_q_out_dtype = tp >= 4 ? DType::kE4M3 : DType::kBF16;
    run_case(c);
  }
}

TEST(FusedQkNormRope, DenseMode) {
  MSA_REQUIRE_TEST_DEVICE();
  for (bool wide : {false, true}) {
    for (Layout layout : {Layout::kNone, Layout::kPacked}) {
      SCOPED_TRACE(std::string(wide ? "5-part row" : "3-part row") +
                   (layout == Layout::kNone ? ", no cache" : ", packed cache"));
      FusedCase c = tp_case(4, 9);
      c.mode = PreAttentionMode::kDense;
      c.dense_full_width = wide;
      c.layout = layout;
      c.q_out = wide;
      run_case(c);
    }
  }
}

TEST(FusedQkNormRope, SkipIndexLeavesIndexSegmentsAndCacheUntouched) {
  MSA_REQUIRE_TEST_DEVICE();
  // verify() expects index segments bit-unchanged outside sparse mode and every bit of the
  // index cache unchanged: engines pass a reuse layer's index cache (and index slots) through
  // (spec A11), and the op must accept it without writing it.
  for (int tp : {4, 8}) {
    FusedCase c = tp_case(tp, 12);
    c.mode = PreAttentionMode::kSkipIndex;
    c.q_out = tp == 8;
    c.layout = Layout::kSplitNhd;
    c.separate_index_slots = tp == 8;
    c.index_cache_dtype = tp == 8 ? DType::kE4M3 : DType::kBF16;
    run_case(c);
  }
}

TEST(FusedQkNormRope, F16ActivationsAndMixedDtypes) {
  MSA_REQUIRE_TEST_DEVICE();
  FusedCase c = tp_case(4, 11);
  c.act = DType::kF16;
  c.weight_dtype = DType::kF16;
  c.cos_sin_dtype = DType::kBF16;
  c.id_dtype = DType::kI32;
  c.cache_dtype = DType::kBF16;  // f16 qkv converted into a bf16 cache
  c.q_out = true;
  c.index_q_out = true;
  run_case(c);
  c.cache_dtype = DType::kF16;
  c.cos_sin_dtype = DType::kF16;
  c.weight_dtype = DType::kF32;
  c.index_cache_dtype = DType::kE4M3;
  run_case(c);
  c.act = DType::kBF16;
  c.weight_dtype = DType::kBF16;
  c.cache_dtype = DType::kF16;  // bf16 qkv converted into an f16 cache
  run_case(c);
}

TEST(FusedQkNormRope, Fp8CacheScaleModesAndLayouts) {
  MSA_REQUIRE_TEST_DEVICE();
  for (KvScaleMode mode :
       {KvScaleMode::kNone, KvScaleMode::kPerLayer, KvScaleMode::kPerTokenHead}) {
    for (Layout layout : {Layout::kPacked, Layout::kSplitNhd, Layout::kSplitHnd}) {
      SCOPED_TRACE("scale mode " + std::to_string(static_cast<int>(mode)) + " layout " +
                   std::to_string(static_cast<int>(layout)));
      FusedCase c = tp_case(2, 7);
      c.cache_dtype = DType::kE4M3;
      c.scale_mode = mode;
      c.layout = layout;
      c.index_cache_dtype = DType::kE4M3;
      c.index_q_out = true;
      c.index_q_out_dtype = DType::kE4M3;
      run_case(c);
    }
  }
}

TEST(FusedQkNormRope, Fp8CacheSaturates) {
  MSA_REQUIRE_TEST_DEVICE();
  // Scales near 0.001 put most |x / scale| beyond 448: stored values must saturate to +-448.
  FusedCase c = tp_case(4, 5);
  c.cache_dtype = DType::kE4M3;
  c.scale_mode = KvScaleMode::kPerLayer;
  c.layer_scale = 0.03;
  c.layout = Layout::kSplitHnd;
  run_case(c);
}

TEST(FusedQkNormRope, Bf16CacheLayouts) {
  MSA_REQUIRE_TEST_DEVICE();
  for (Layout layout : {Layout::kSplitNhd, Layout::kSplitHnd}) {
    FusedCase c = tp_case(1, 3);
    c.layout = layout;
    run_case(c);
  }
}

TEST(FusedQkNormRope, NegativeSlotsPaddingRowsAndSeparateIndexSlots) {
  MSA_REQUIRE_TEST_DEVICE();
  for (bool separate : {false, true}) {
    SCOPED_TRACE(separate ? "index_slot_mapping" : "slot_mapping for the index cache");
    FusedCase c = tp_case(4, 33);
    c.negative_slots = true;
    c.padding_rows = true;
    c.separate_index_slots = separate;
    c.q_out = separate;
    c.index_q_out = separate;
    c.id_dtype = separate ? DType::kI32 : DType::kI64;
    run_case(c);
  }
  FusedCase c = tp_case(8, 8);
  c.mode = PreAttentionMode::kDense;
  c.padding_rows = true;
  c.negative_slots = true;
  c.q_out = true;
  c.q_out_3d = false;
  run_case(c);
}

TEST(FusedQkNormRope, StridedQkvRows) {
  MSA_REQUIRE_TEST_DEVICE();
  FusedCase c = tp_case(4, 6);
  c.qkv_row_pad = 40;
  c.padding_rows = true;
  run_case(c);
}

TEST(FusedQkNormRope, SmallHeadsAndIndexDimDifferentFromHeadDim) {
  MSA_REQUIRE_TEST_DEVICE();
  FusedCase c;
  c.nq = 3;
  c.nkv = 1;
  c.niq = 2;
  c.head_dim = 32;
  c.index_dim = 16;
  c.rotary_dim = 16;
  c.tokens = 5;
  c.index_q_out = true;
  run_case(c);
}

TEST(FusedQkNormRope, LargePositionsWithOpBuiltTable) {
  MSA_REQUIRE_TEST_DEVICE();
  // A [1000064, 4] table keeps the test's memory small while positions reach 1M.
  FusedCase c;
  c.nq = 2;
  c.nkv = 1;
  c.niq = 1;
  c.head_dim = 16;
  c.index_dim = 16;
  c.rotary_dim = 4;
  c.tokens = 9;
  c.large_positions = true;
  c.q_out = true;
  run_case(c);
}

TEST(FusedQkNormRope, ResultsIndependentOfThreadCount) {
  MSA_REQUIRE_TEST_DEVICE();
  FusedCase c = tp_case(4, 33);
  c.q_out = true;
  c.index_q_out = true;
  c.padding_rows = true;
  c.negative_slots = true;
  c.cache_dtype = DType::kE4M3;
  c.scale_mode = KvScaleMode::kPerTokenHead;
  const Fixture first = run_on(c, test_device(), 1);
  verify(first);
  // On CUDA the thread count is ignored: this repeats the run and checks it is bitwise stable.
  for (int threads : {2, 8}) {
    SCOPED_TRACE("cpu_threads " + std::to_string(threads));
    expect_same_results(first, run_on(c, test_device(), threads), /*bitwise=*/true);
  }
}

// The norm weights and the cos/sin table as strided views of padded fp32 buffers (NaN between the
// elements) holding the same values as the contiguous ones: the op honours their strides, and
// every output is the same bits as with contiguous tables.
TEST(FusedQkNormRope, StridedTablesGiveTheSameBits) {
  MSA_REQUIRE_TEST_DEVICE();
  FusedCase c = tp_case(4, 33);
  c.q_out = true;
  c.index_q_out = true;
  c.padding_rows = true;
  const Fixture contiguous = run_on(c, test_device(), 1);
  verify(contiguous);
  Fixture fx = make_fixture(c, test_device());
  auto strided = [&](const TestTensor& t) {
    std::vector<int64_t> strides(t.shape().size());
    int64_t elems = 1;
    for (size_t i = strides.size(); i-- > 0;) {
      strides[i] = 2 * elems;
      elems *= t.shape()[i] * 2;
    }
    TestTensor out(DType::kF32, t.shape(), strides, elems, fx.device);
    out.fill_bytes(0xFF);  // NaN between the values: a read of the padding would show
    for (int64_t i = 0; i < t.numel(); ++i) out.set_flat(i, t.get_flat(i));
    out.upload();
    return out;
  };
  fx.cos_sin = strided(fx.cos_sin);
  fx.q_w = strided(fx.q_w);
  fx.k_w = strided(fx.k_w);
  fx.iq_w = strided(fx.iq_w);
  fx.ik_w = strided(fx.ik_w);
  fx.poison_outputs();
  const Status st = run_fixture(fx, 1);
  ASSERT_TRUE(st.ok()) << st.to_string();
  fx.download_all();
  expect_same_results(contiguous, fx, /*bitwise=*/true);
}

// ---- Bad inputs --------------------------------------------------------------------------

// A valid sparse call; each bad-input test breaks one thing and checks that the call fails
// with the expected code, a message naming the argument, and every output unchanged.
FusedCase small_case() {
  FusedCase c;
  c.nq = 4;
  c.nkv = 1;
  c.niq = 1;
  c.head_dim = 16;
  c.index_dim = 16;
  c.rotary_dim = 8;
  c.tokens = 5;
  c.q_out = true;
  c.index_q_out = true;
  return c;
}

class FusedBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    MSA_REQUIRE_TEST_DEVICE();
    fx_ = make_fixture(small_case(), test_device());
    fx_.poison_outputs();
  }

  // Runs `args`, expects `code` with `message_part` in the message, and checks that qkv, the
  // caches and the separate outputs are unchanged.
  void expect_rejected(const FusedQkNormRopeArgs& args, StatusCode code,
                       const std::string& message_part) {
    const Status s = run(args, Workspace{}, Stream{});
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(message_part), std::string::npos)
        << "message \"" << s.message() << "\" does not name " << message_part;
    fx_.download_all();
    EXPECT_TRUE(fx_.qkv.host_bytes() == fx_.qkv0) << "qkv modified";
    EXPECT_TRUE(fx_.kv_storage.host_bytes() == fx_.kv0) << "kv cache modified";
    EXPECT_TRUE(fx_.index_cache.host_bytes() == fx_.ic0) << "index cache modified";
    for (const TestTensor* out : {&fx_.q_out, &fx_.index_q_out}) {
      bool poisoned = true;
      for (uint8_t b : out->host_bytes()) poisoned = poisoned && b == 0xFF;
      EXPECT_TRUE(poisoned) << "separate output modified";
    }
  }

  // Mutates a valid call; it must fail with kInvalidArgument naming `arg`.
  void expect_invalid(const std::function<void(FusedQkNormRopeArgs&)>& mutate,
                      const std::string& arg, const std::string& what) {
    SCOPED_TRACE(what);
    FusedQkNormRopeArgs a = fx_.args();
    mutate(a);
    expect_rejected(a, StatusCode::kInvalidArgument, arg + ":");
  }

  Fixture fx_;
};

TEST_F(FusedBadInput, ValidCallSucceeds) { EXPECT_TRUE(run_fixture(fx_, 0).ok()); }

TEST_F(FusedBadInput, Shapes) {
  using A = FusedQkNormRopeArgs;
  expect_invalid([](A& a) { a.qkv.shape[1] -= 1; }, "qkv", "width one short");
  expect_invalid([](A& a) { a.qkv.shape[1] = (4 + 2) * 16; }, "qkv", "dense width, sparse mode");
  expect_invalid([](A& a) { a.qkv.ndim = 1; }, "qkv", "rank 1");
  expect_invalid([](A& a) { a.positions.shape[0] -= 1; }, "positions", "length");
  expect_invalid([](A& a) { a.slot_mapping.shape[0] += 1; }, "slot_mapping", "length");
  expect_invalid([](A& a) { a.k_norm_weight.shape[0] = 8; }, "k_norm_weight", "length");
  expect_invalid([](A& a) { a.index_k_norm_weight.shape[0] = 8; }, "index_k_norm_weight", "length");
  expect_invalid([](A& a) { a.q_out.shape[1] = 3; }, "q_out", "heads");
  expect_invalid([](A& a) { a.index_q_out.shape[2] = 8; }, "index_q_out", "dim");
  expect_invalid([](A& a) { a.index_cache.shape[2] = 8; }, "index_cache", "dim");
  expect_invalid([](A& a) { a.cos_sin_cache.shape[1] = 16; }, "cos_sin_cache", "width");
}

TEST_F(FusedBadInput, HeadCounts) {
  using A = FusedQkNormRopeArgs;
  // Head counts that do not fit the row are reported against the qkv width they contradict.
  expect_invalid([](A& a) { a.num_q_heads += 1; }, "qkv", "one q head too many");
  expect_invalid([](A& a) { a.num_q_heads = 0; }, "num_q_heads", "zero q heads");
  expect_invalid([](A& a) { a.num_kv_heads = 2; }, "qkv", "kv heads too many");
  expect_invalid([](A& a) { a.num_kv_heads = -1; }, "num_kv_heads", "negative");
  expect_invalid([](A& a) { a.num_index_heads = 0; }, "num_index_heads", "none in sparse mode");
  expect_invalid([](A& a) { a.num_index_heads = 2; }, "qkv", "index heads too many");
  expect_invalid(
      [](A& a) {
        a.kv_cache.k.shape[1] = 2;
        a.kv_cache.v.shape[1] = 2;
      },
      "kv_cache.k", "cache head count");
  expect_invalid(
      [](A& a) {
        a.kv_cache.k.shape[3] = 8;
        a.kv_cache.v.shape[3] = 8;
      },
      "kv_cache.k", "cache head_dim");
}

TEST_F(FusedBadInput, RotaryDimEpsAndMode) {
  using A = FusedQkNormRopeArgs;
  expect_invalid([](A& a) { a.rotary_dim = 7; }, "rotary_dim", "odd");
  expect_invalid([](A& a) { a.rotary_dim = 18; }, "rotary_dim", "larger than head_dim");
  expect_invalid([](A& a) { a.rotary_dim = 0; }, "rotary_dim", "zero");
  expect_invalid([](A& a) { a.eps = 0.0f; }, "eps", "zero");
  expect_invalid([](A& a) { a.mode = static_cast<PreAttentionMode>(7); }, "mode", "unknown");
}

TEST_F(FusedBadInput, Dtypes) {
  using A = FusedQkNormRopeArgs;
  expect_invalid([](A& a) { a.qkv.dtype = DType::kF32; }, "qkv", "f32");
  expect_invalid([](A& a) { a.positions.dtype = DType::kF32; }, "positions", "f32");
  expect_invalid([](A& a) { a.cos_sin_cache.dtype = DType::kI32; }, "cos_sin_cache", "i32");
  expect_invalid([](A& a) { a.q_norm_weight.dtype = DType::kF16; }, "q_norm_weight",
                 "f16 weight with bf16 qkv");
  expect_invalid([](A& a) { a.k_norm_weight.dtype = DType::kI32; }, "k_norm_weight", "i32");
  expect_invalid([](A& a) { a.index_q_norm_weight.dtype = DType::kE4M3; }, "index_q_norm_weight",
                 "e4m3");
  expect_invalid([](A& a) { a.index_k_norm_weight.dtype = DType::kI64; }, "index_k_norm_weight",
                 "i64");
  expect_invalid([](A& a) { a.slot_mapping.dtype = DType::kF32; }, "slot_mapping", "f32");
  expect_invalid(
      [](A& a) {
        a.kv_cache.k.dtype = DType::kF32;
        a.kv_cache.v.dtype = DType::kF32;
      },
      "kv_cache.k", "f32 cache");
  expect_invalid([](A& a) { a.kv_cache.v.dtype = DType::kF16; }, "kv_cache.v",
                 "k and v dtypes differ");
  expect_invalid([](A& a) { a.index_cache.dtype = DType::kF16; }, "index_cache", "f16");
  expect_invalid([](A& a) { a.q_out.dtype = DType::kF16; }, "q_out", "not the qkv dtype");
  expect_invalid([](A& a) { a.index_q_out.dtype = DType::kF32; }, "index_q_out", "f32");
  expect_invalid([](A& a) { a.error_flags.dtype = DType::kI64; }, "error_flags", "i64");
  expect_invalid(
      [](A& a) {
        a.kv_cache.scale_mode = KvScaleMode::kPerLayer;
        a.kv_cache.k_scale = a.error_flags;
        a.kv_cache.v_scale = a.error_flags;
      },
      "kv_cache.scale_mode", "scales on a bf16 cache");
}

TEST_F(FusedBadInput, StridesAndDevices) {
  using A = FusedQkNormRopeArgs;
  expect_invalid([](A& a) { a.qkv.strides[1] = 2; }, "qkv", "last stride 2");
  expect_invalid([](A& a) { a.q_out.strides[2] = 2; }, "q_out", "last stride 2");
  expect_invalid([](A& a) { a.index_cache.strides[2] = 2; }, "index_cache", "last stride 2");
  const Device other = test_device().is_cpu() ? Device::cuda(0) : Device::cpu();
  expect_invalid([&](A& a) { a.positions.device = other; }, "positions", "other device");
  expect_invalid([&](A& a) { a.kv_cache.v.device = other; }, "kv_cache.v", "other device");
  expect_invalid([&](A& a) { a.index_q_out.device = other; }, "index_q_out", "other device");
}

TEST_F(FusedBadInput, OptionalArgumentCombinations) {
  using A = FusedQkNormRopeArgs;
  expect_invalid([](A& a) { a.kv_cache = KvCacheView(); }, "kv_cache",
                 "slot_mapping without kv_cache");
  expect_invalid([](A& a) { a.slot_mapping = TensorView(); }, "slot_mapping",
                 "kv_cache without slot_mapping");
  expect_invalid(
      [](A& a) {
        a.slot_mapping = TensorView();
        a.kv_cache = KvCacheView();
      },
      "index_slot_mapping", "index_cache with no slot mapping at all");
  expect_invalid(
      [&](A& a) {
        a.index_slot_mapping = fx_.index_slots.view();
        a.index_cache = TensorView();
      },
      "index_slot_mapping", "index_slot_mapping without index_cache");
  expect_invalid([](A& a) { a.index_q_norm_weight = TensorView(); }, "index_q_norm_weight",
                 "sparse mode without index weights");
  // index_q_out outside sparse mode would be a silent no-op.
  for (PreAttentionMode mode : {PreAttentionMode::kDense, PreAttentionMode::kSkipIndex}) {
    const std::string m = mode == PreAttentionMode::kDense ? "dense" : "skip-index";
    expect_invalid(
        [&](A& a) {
          a.mode = mode;
          a.index_cache = TensorView();
        },
        "index_q_out", m);
  }
  // Dense layers have no index cache; skip-index layers may pass theirs through (see
  // SkipIndexLeavesIndexSegmentsAndCacheUntouched), but it must still be a valid one.
  expect_invalid(
      [&](A& a) {
        a.mode = PreAttentionMode::kDense;
        a.index_q_out = TensorView();
      },
      "index_cache", "dense");
  expect_invalid(
      [&](A& a) {
        a.mode = PreAttentionMode::kDense;
        a.index_q_out = TensorView();
        a.index_cache = TensorView();
        a.index_slot_mapping = fx_.index_slots.view();
      },
      "index_slot_mapping", "dense");
  expect_invalid(
      [&](A& a) {
        a.mode = PreAttentionMode::kSkipIndex;
        a.index_q_out = TensorView();
        a.index_cache.strides[2] = 2;
      },
      "index_cache", "skip-index, last stride 2");
  expect_invalid(
      [&](A& a) {
        a.mode = PreAttentionMode::kSkipIndex;
        a.index_q_out = TensorView();
        a.index_cache = TensorView();
        a.index_slot_mapping = fx_.index_slots.view();
      },
      "index_slot_mapping", "skip-index, without index_cache");
}

// Out-of-range values inside tensors: the CPU backend rejects the call with kOutOfRange before
// writing anything; the CUDA backend skips the bad item and raises the error flag.
class FusedBadValue : public FusedBadInput {
 protected:
  void expect_value_error(TestTensor& tensor, int64_t index, int64_t value, int32_t bit,
                          const std::string& message_part) {
    tensor.set({index}, static_cast<double>(value));
    tensor.upload();
    const FusedQkNormRopeArgs a = fx_.args();
    if (test_device().is_cpu()) {
      expect_rejected(a, StatusCode::kOutOfRange, message_part);
    } else {
      const Status s = run(a, Workspace{}, Stream{});
      EXPECT_TRUE(s.ok()) << s.to_string();
      fx_.download_all();
    }
    EXPECT_EQ(static_cast<int32_t>(fx_.flags.get({0})) & bit, bit) << "error flag not raised";
  }
};

TEST_F(FusedBadValue, SlotOutOfRange) {
  const int64_t bad = fx_.num_blocks * kBlockSize;
  expect_value_error(fx_.slots, 2, bad, kDeviceErrorSlot,
                     "slot_mapping[2] = " + std::to_string(bad));
}

TEST_F(FusedBadValue, IndexSlotOutOfRange) {
  fx_.c.separate_index_slots = true;
  const int64_t bad = fx_.index_num_blocks * kBlockSize;
  expect_value_error(fx_.index_slots, 4, bad, kDeviceErrorSlot,
                     "index_slot_mapping[4] = " + std::to_string(bad));
}

TEST_F(FusedBadValue, PositionOutOfRange) {
  expect_value_error(fx_.positions, 1, fx_.max_pos, kDeviceErrorPosition,
                     "positions[1] = " + std::to_string(fx_.max_pos));
}

}  // namespace
}  // namespace test
}  // namespace msa
