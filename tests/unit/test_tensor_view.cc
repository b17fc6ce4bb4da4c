// Tensor views and the KV cache layout adapters (spec A6, B4): strides, sub-views, and the
// element offsets every layout maps K and V to.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "msa/cache.h"
#include "msa/tensor.h"

namespace msa {
namespace {

// Element offset of a view's element relative to a base pointer.
int64_t element_offset(const TensorView& base, const TensorView& view,
                       std::initializer_list<int64_t> idx) {
  const int64_t bytes = static_cast<char*>(view.data) - static_cast<char*>(base.data);
  return bytes / dtype_size(view.dtype) + view.offset(idx);
}

TEST(TensorView, MakeTensorIsRowMajor) {
  std::vector<float> storage(24);
  const TensorView t = make_tensor(storage.data(), DType::kF32, {2, 3, 4});
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.offset({1, 2, 3}), 23);
  EXPECT_TRUE(t.device.is_cpu());
}

TEST(TensorView, SelectSlicePermute) {
  std::vector<uint16_t> storage(24);
  const TensorView t = make_tensor(storage.data(), DType::kBF16, {2, 3, 4});

  const TensorView s = t.select(1, 2);  // [2, 4]
  EXPECT_EQ(s.ndim, 2);
  EXPECT_EQ(s.size(0), 2);
  EXPECT_EQ(s.size(1), 4);
  EXPECT_EQ(s.stride(0), 12);
  EXPECT_EQ(s.stride(1), 1);
  EXPECT_EQ(element_offset(t, s, {1, 3}), t.offset({1, 2, 3}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_TRUE(t.select(0, 1).is_contiguous());

  const TensorView l = t.slice(2, 1, 2);  // [2, 3, 2]
  EXPECT_EQ(l.size(2), 2);
  EXPECT_EQ(l.numel(), 12);
  EXPECT_EQ(element_offset(t, l, {1, 1, 1}), t.offset({1, 1, 2}));
  EXPECT_FALSE(l.is_contiguous());
  EXPECT_TRUE(t.slice(0, 1, 1).is_contiguous());

  const TensorView p = t.permute({2, 0, 1});  // [4, 2, 3]
  EXPECT_EQ(p.size(0), 4);
  EXPECT_EQ(p.size(1), 2);
  EXPECT_EQ(p.size(2), 3);
  EXPECT_EQ(p.offset({3, 1, 2}), t.offset({1, 2, 3}));
  EXPECT_FALSE(p.is_contiguous());
}

TEST(TensorView, ContiguityIgnoresSizeOneDims) {
  int32_t x[6];
  EXPECT_TRUE(make_strided_tensor(x, DType::kI32, {2, 1, 3}, {3, 99, 1}).is_contiguous());
  EXPECT_FALSE(make_strided_tensor(x, DType::kI32, {2, 3}, {4, 1}).is_contiguous());
  EXPECT_FALSE(make_strided_tensor(x, DType::kI32, {2, 3}, {1, 2}).is_contiguous());
}

TEST(TensorView, TooManyDimsGiveAnInvalidView) {
  // Guard words around the view: make_tensor with 7 dimensions used to write past the arrays.
  struct Guarded {
    int64_t before[4] = {1, 2, 3, 4};
    TensorView view;
    int64_t after[16] = {};
  } g;
  int32_t x[1];
  g.view = make_tensor(x, DType::kI32, {1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(g.view.ndim, kInvalidNdim);
  EXPECT_EQ(g.view.data, x);  // still "given": an optional argument is not silently dropped
  EXPECT_EQ(g.view.numel(), -1);
  EXPECT_FALSE(g.view.is_contiguous());
  g.view = make_strided_tensor(x, DType::kI32, {1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(g.view.ndim, kInvalidNdim);
  for (int64_t w : g.after) EXPECT_EQ(w, 0);
  EXPECT_EQ(g.before[3], 4);
  // Strides and shape of different lengths.
  EXPECT_EQ(make_strided_tensor(x, DType::kI32, {1, 1}, {1}).ndim, kInvalidNdim);
  EXPECT_EQ(make_strided_tensor(x, DType::kI32, {1}, {1, 1}).ndim, kInvalidNdim);
  // A shape whose row-major strides do not fit int64.
  EXPECT_EQ(make_tensor(x, DType::kI32, {int64_t{1} << 40, int64_t{1} << 40}).ndim, kInvalidNdim);
  // Six dimensions are fine.
  EXPECT_EQ(make_tensor(x, DType::kI32, {1, 1, 1, 1, 1, 1}).ndim, 6);
}

TEST(TensorView, HelpersRejectDimensionsOutsideTheView) {
  int32_t x[6];
  const TensorView t = make_tensor(x, DType::kI32, {2, 3});
  EXPECT_EQ(t.select(2, 0).ndim, kInvalidNdim);
  EXPECT_EQ(t.select(-1, 0).ndim, kInvalidNdim);
  EXPECT_EQ(t.slice(6, 0, 1).ndim, kInvalidNdim);
  EXPECT_EQ(t.slice(-1, 0, 1).ndim, kInvalidNdim);
  EXPECT_EQ(t.permute({0, 2}).ndim, kInvalidNdim);
  EXPECT_EQ(t.permute({0, 0}).ndim, kInvalidNdim);
  EXPECT_EQ(t.permute({0, 1, 2}).ndim, kInvalidNdim);
  EXPECT_EQ(t.permute({1, 0}).ndim, 2);
  // A byte offset past int64.
  EXPECT_EQ(t.select(0, int64_t{1} << 62).ndim, kInvalidNdim);
  // Byte offsets that fit int64 but would take the address below zero (found by the fuzzer).
  EXPECT_EQ(t.select(0, -(int64_t{1} << 50)).ndim, kInvalidNdim);
  EXPECT_EQ(t.slice(1, -(int64_t{1} << 52), 1).ndim, kInvalidNdim);
  EXPECT_EQ(t.select(0, 1).data, x + 3);
  // Views of an invalid view stay invalid; a view with a rank past kMaxDims is read safely.
  TensorView bad = t;
  bad.ndim = 100;
  EXPECT_EQ(bad.numel(), -1);
  EXPECT_FALSE(bad.is_contiguous());
  EXPECT_EQ(bad.offset({1, 1, 1, 1, 1, 1, 1, 1}), 0);
  EXPECT_EQ(bad.select(0, 0).ndim, kInvalidNdim);
  EXPECT_EQ(bad.slice(0, 0, 1).ndim, kInvalidNdim);
  EXPECT_EQ(bad.permute({0}).ndim, kInvalidNdim);
}

TEST(TensorView, NumelReportsOverflow) {
  int32_t x[1];
  const TensorView t =
      make_strided_tensor(x, DType::kI32, {int64_t{1} << 40, int64_t{1} << 40}, {0, 0});
  EXPECT_EQ(t.numel(), -1);
  EXPECT_EQ(make_strided_tensor(x, DType::kI32, {int64_t{1} << 40, 0}, {0, 0}).numel(), 0);
}

TEST(KvCacheLayout, PackedSplitsContentDims) {
  const int64_t nb = 3, hkv = 2, bs = 128, d = 128;
  std::vector<uint16_t> storage(static_cast<size_t>(nb * hkv * bs * 2 * d));
  const TensorView cache = make_tensor(storage.data(), DType::kBF16, {nb, hkv, bs, 2 * d});
  KvCacheView kv;
  ASSERT_TRUE(make_packed_kv_cache(cache, &kv).ok());
  EXPECT_EQ(kv.k.data, cache.data);
  EXPECT_EQ(static_cast<char*>(kv.v.data) - static_cast<char*>(cache.data), d * 2);
  for (const TensorView* side : {&kv.k, &kv.v}) {
    EXPECT_EQ(side->ndim, 4);
    EXPECT_EQ(side->dtype, DType::kBF16);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(side->stride(k), cache.stride(k));
    EXPECT_EQ(side->size(3), d);
  }
  EXPECT_EQ(kv.num_blocks(), nb);
  EXPECT_EQ(kv.num_kv_heads(), hkv);
  EXPECT_EQ(kv.block_size(), bs);
  EXPECT_EQ(kv.head_dim(), d);
  EXPECT_EQ(element_offset(cache, kv.v, {2, 1, 5, 7}), cache.offset({2, 1, 5, d + 7}));

  // An engine buffer with padded block stride keeps its strides.
  const TensorView padded = make_strided_tensor(storage.data(), DType::kBF16, {2, hkv, bs, 2 * d},
                                                {hkv * bs * 2 * d + 64, bs * 2 * d, 2 * d, 1});
  ASSERT_TRUE(make_packed_kv_cache(padded, &kv).ok());
  EXPECT_EQ(kv.k.stride(0), hkv * bs * 2 * d + 64);
}

TEST(KvCacheLayout, PackedRejectsBadShapes) {
  std::vector<uint16_t> storage(4 * 128 * 256);
  KvCacheView kv;
  EXPECT_EQ(
      make_packed_kv_cache(make_tensor(storage.data(), DType::kBF16, {4, 128, 256}), &kv).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      make_packed_kv_cache(make_tensor(storage.data(), DType::kBF16, {2, 1, 128, 255}), &kv).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(make_packed_kv_cache(make_strided_tensor(storage.data(), DType::kBF16, {1, 1, 128, 256},
                                                     {65536, 65536, 512, 2}),
                                 &kv)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(make_packed_kv_cache(TensorView(), &kv).code(), StatusCode::kInvalidArgument);
}

TEST(KvCacheLayout, SplitNhd) {
  const int64_t nb = 3, hkv = 2, bs = 128, d = 128;
  std::vector<uint8_t> storage(static_cast<size_t>(nb * 2 * bs * hkv * d));
  const TensorView cache = make_tensor(storage.data(), DType::kE4M3, {nb, 2, bs, hkv, d});
  KvCacheView kv;
  ASSERT_TRUE(make_split_kv_cache(cache, &kv).ok());
  EXPECT_EQ(kv.num_blocks(), nb);
  EXPECT_EQ(kv.num_kv_heads(), hkv);
  EXPECT_EQ(kv.block_size(), bs);
  EXPECT_EQ(kv.head_dim(), d);
  for (int64_t n : {0, 2}) {
    for (int64_t h : {0, 1}) {
      for (int64_t t : {0, 77, 127}) {
        const int64_t want_k = n * 2 * bs * hkv * d + t * hkv * d + h * d + 5;
        EXPECT_EQ(element_offset(cache, kv.k, {n, h, t, 5}), want_k);
        EXPECT_EQ(element_offset(cache, kv.v, {n, h, t, 5}), want_k + bs * hkv * d);
      }
    }
  }
}

TEST(KvCacheLayout, SplitHndThroughStrides) {
  const int64_t nb = 2, hkv = 4, bs = 128, d = 128;
  std::vector<uint16_t> storage(static_cast<size_t>(nb * 2 * hkv * bs * d));
  // Physical [nb, 2, Hkv, bs, D] described in the logical NHD order [nb, 2, bs, Hkv, D].
  const TensorView cache = make_strided_tensor(storage.data(), DType::kF16, {nb, 2, bs, hkv, d},
                                               {2 * hkv * bs * d, hkv * bs * d, d, bs * d, 1});
  KvCacheView kv;
  ASSERT_TRUE(make_split_kv_cache(cache, &kv).ok());
  EXPECT_EQ(kv.num_kv_heads(), hkv);
  EXPECT_EQ(kv.block_size(), bs);
  for (int64_t n : {0, 1}) {
    for (int64_t h : {0, 3}) {
      for (int64_t t : {0, 100}) {
        const int64_t want_k = n * 2 * hkv * bs * d + h * bs * d + t * d + 9;
        EXPECT_EQ(element_offset(cache, kv.k, {n, h, t, 9}), want_k);
        EXPECT_EQ(element_offset(cache, kv.v, {n, h, t, 9}), want_k + hkv * bs * d);
      }
    }
  }
}

TEST(KvCacheLayout, SplitRejectsBadShapes) {
  std::vector<uint16_t> storage(3 * 128 * 128);
  KvCacheView kv;
  EXPECT_EQ(make_split_kv_cache(make_tensor(storage.data(), DType::kBF16, {1, 3, 128, 1, 128}), &kv)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      make_split_kv_cache(make_tensor(storage.data(), DType::kBF16, {2, 128, 1, 128}), &kv).code(),
      StatusCode::kInvalidArgument);
}

class KvScales : public ::testing::Test {
 protected:
  static constexpr int64_t kBlocks = 2, kHeads = 2, kBs = 128, kD = 128;
  void SetUp() override {
    storage_.resize(static_cast<size_t>(kBlocks * kHeads * kBs * 2 * kD));
    scales_.resize(static_cast<size_t>(2 * (kHeads + 1) * kBlocks * kBs));
    ASSERT_TRUE(
        make_packed_kv_cache(
            make_tensor(storage_.data(), DType::kE4M3, {kBlocks, kHeads, kBs, 2 * kD}), &e4m3_)
            .ok());
  }
  TensorView scale(std::initializer_list<int64_t> shape, DType dtype = DType::kF32) {
    return make_tensor(scales_.data(), dtype, shape);
  }
  std::vector<uint8_t> storage_;
  std::vector<float> scales_;
  KvCacheView e4m3_;
};

TEST_F(KvScales, PerLayerShapes) {
  KvCacheView v = e4m3_;
  EXPECT_TRUE(set_kv_scales(&v, KvScaleMode::kPerLayer, scale({1}), scale({1})).ok());
  EXPECT_EQ(v.scale_mode, KvScaleMode::kPerLayer);
  EXPECT_TRUE(set_kv_scales(&v, KvScaleMode::kPerLayer, scale({}), scale({})).ok());
  EXPECT_EQ(set_kv_scales(&v, KvScaleMode::kPerLayer, scale({2}), scale({1})).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(set_kv_scales(&v, KvScaleMode::kPerLayer, scale({1}), scale({1, 1, 1})).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(set_kv_scales(&v, KvScaleMode::kPerLayer, scale({1}, DType::kBF16), scale({1})).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(set_kv_scales(&v, KvScaleMode::kPerLayer, TensorView(), scale({1})).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(KvScales, PerTokenHeadShapes) {
  KvCacheView v = e4m3_;
  const int64_t slots = kBlocks * kBs;
  EXPECT_TRUE(
      set_kv_scales(&v, KvScaleMode::kPerTokenHead, scale({kHeads, slots}), scale({kHeads, slots}))
          .ok());
  EXPECT_EQ(set_kv_scales(&v, KvScaleMode::kPerTokenHead, scale({kHeads + 1, slots}),
                          scale({kHeads, slots}))
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(set_kv_scales(&v, KvScaleMode::kPerTokenHead, scale({kHeads, slots}),
                          scale({kHeads, slots - 1}))
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      set_kv_scales(&v, KvScaleMode::kPerTokenHead, scale({kHeads * slots}), scale({kHeads, slots}))
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(set_kv_scales(&v, KvScaleMode::kPerTokenHead, scale({kHeads, slots}, DType::kI32),
                          scale({kHeads, slots}))
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_F(KvScales, RejectedOnBf16Cache) {
  std::vector<uint16_t> bf16(static_cast<size_t>(kBlocks * kHeads * kBs * 2 * kD));
  KvCacheView v;
  ASSERT_TRUE(make_packed_kv_cache(
                  make_tensor(bf16.data(), DType::kBF16, {kBlocks, kHeads, kBs, 2 * kD}), &v)
                  .ok());
  EXPECT_EQ(set_kv_scales(&v, KvScaleMode::kPerLayer, scale({1}), scale({1})).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(set_kv_scales(&v, KvScaleMode::kNone, TensorView(), TensorView()).ok());
}

}  // namespace
}  // namespace msa
