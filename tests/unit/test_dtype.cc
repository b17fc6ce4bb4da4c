// Host conversions between float and bf16 / f16 / e4m3 (spec A7), checked against expectations
// computed independently: e4m3 codes from their bit fields, and rounding from a float64
// round-to-nearest-even reference on the format's grid.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "msa/dtype.h"

namespace msa {
namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// A binary format with `mant_bits` stored mantissa bits, smallest normal exponent `min_exp`
// and largest finite value `max_finite`; beyond it values saturate or become infinity.
struct Format {
  int mant_bits;
  int min_exp;
  double max_finite;
  bool saturate;
};
constexpr Format kE4M3 = {3, -6, 448.0, true};
constexpr Format kF16 = {10, -14, 65504.0, false};
constexpr Format kBF16 = {7, -126, 3.3895313892515355e38, false};

// Rounds a finite float to the format with round-to-nearest-even, in float64 (exact: the
// quotient by a power-of-two ulp is exact, and nearbyint rounds half to even).
double reference_round(float x, const Format& f) {
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0.0) return static_cast<double>(x);
  int k;
  std::frexp(a, &k);  // a = m * 2^k, m in [0.5, 1): floor(log2 a) = k - 1
  const int e = std::max(k - 1, f.min_exp);
  const double ulp = std::ldexp(1.0, e - f.mant_bits);
  double q = std::nearbyint(a / ulp) * ulp;
  if (q > f.max_finite) q = f.saturate ? f.max_finite : static_cast<double>(kInf);
  return std::copysign(q, static_cast<double>(x));
}

// Random floats: random bit patterns (all exponents) plus log-uniform magnitudes around the
// format's range, where rounding decisions are dense.
std::vector<float> sample_floats(double lo_exp, double hi_exp, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> e(lo_exp, hi_exp);
  std::vector<float> xs;
  for (int i = 0; i < 100000; ++i) {
    const float mag = static_cast<float>(std::exp2(e(rng)));
    xs.push_back((rng() & 1) ? -mag : mag);
    const float raw = float_of(static_cast<uint32_t>(rng()));
    if (std::isfinite(raw)) xs.push_back(raw);
  }
  return xs;
}

void expect_same_float(float got, double want, float x) {
  EXPECT_EQ(bits_of(got), bits_of(static_cast<float>(want)))
      << "x = " << x << " (bits 0x" << std::hex << bits_of(x) << "): got " << got << ", want "
      << want;
}

// Value of an e4m3 code from its fields: S.EEEE.MMM, bias 7, subnormals m * 2^-9.
double e4m3_expected(int code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

TEST(DTypeE4M3, EveryCodeDecodesAndRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    const uint8_t c = static_cast<uint8_t>(code);
    const float v = e4m3_to_float(c);
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << "code " << code;
      EXPECT_EQ(std::signbit(v), (code & 0x80) != 0) << "code " << code;
      EXPECT_EQ(float_to_e4m3(v), c) << "NaN keeps its sign";
      continue;
    }
    EXPECT_EQ(bits_of(v), bits_of(static_cast<float>(e4m3_expected(code)))) << "code " << code;
    EXPECT_EQ(float_to_e4m3(v), c) << "code " << code;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(bits_of(e4m3_to_float(0x80)), bits_of(-0.0f));
}

TEST(DTypeE4M3, RoundsToNearestEven) {
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);  // midpoint 1.0 | 1.125: even 1.0
  EXPECT_EQ(float_to_e4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
  EXPECT_EQ(float_to_e4m3(std::nextafter(1.0625f, 0.0f)), 0x38);
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3A);  // midpoint 1.125 | 1.25: even 1.25
  EXPECT_EQ(float_to_e4m3(1.9375f), 0x40);  // midpoint 1.875 | 2.0 carries into the exponent
  EXPECT_EQ(float_to_e4m3(-1.0625f), 0xB8);
}

TEST(DTypeE4M3, SaturatesAndKeepsNaN) {
  for (float x : {449.0f, 464.0f, 480.0f, 500.0f, 1e30f, kInf}) {
    EXPECT_EQ(float_to_e4m3(x), 0x7E) << x;
    EXPECT_EQ(float_to_e4m3(-x), 0xFE) << -x;
  }
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(kNaN), 0x7F);
  EXPECT_EQ(float_to_e4m3(-kNaN), 0xFF);
}

TEST(DTypeE4M3, SubnormalBoundary) {
  const float ulp = std::ldexp(1.0f, -9);
  EXPECT_EQ(float_to_e4m3(ulp), 0x01);
  EXPECT_EQ(float_to_e4m3(ulp / 2), 0x00);  // midpoint 0 | 2^-9: even 0
  EXPECT_EQ(float_to_e4m3(-ulp / 2), 0x80);
  EXPECT_EQ(float_to_e4m3(std::nextafter(ulp / 2, 1.0f)), 0x01);
  EXPECT_EQ(float_to_e4m3(ulp / 4), 0x00);
  EXPECT_EQ(float_to_e4m3(1.5f * ulp), 0x02);  // midpoint 1 | 2 ulps: even 2
  EXPECT_EQ(float_to_e4m3(7.5f * ulp), 0x08);  // largest subnormal rounds up to 2^-6
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
}

TEST(DTypeE4M3, MatchesReferenceRounding) {
  for (float x : sample_floats(-14, 10, 1)) {
    expect_same_float(e4m3_to_float(float_to_e4m3(x)), reference_round(x, kE4M3), x);
  }
}

TEST(DTypeBF16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(float_of(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(float_of(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(float_of(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16(float_of(0x3F807FFFu)), 0x3F80);
  EXPECT_EQ(float_to_bf16(float_of(0x3FFF8000u)), 0x4000);  // carries into the exponent
  EXPECT_EQ(float_to_bf16(float_of(0x3FFFFFFFu)), 0x4000);
  EXPECT_EQ(float_to_bf16(float_of(0xBF818000u)), 0xBF82);
}

TEST(DTypeBF16, SpecialValues) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // overflows to inf
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(float_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(float_to_bf16(-kInf), 0xFF80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(kNaN))));
  // A NaN whose payload lies only in the dropped bits must not become infinity.
  const uint16_t sig = float_to_bf16(float_of(0x7F800001u));
  EXPECT_TRUE(std::isnan(bf16_to_float(sig))) << std::hex << sig;
  const uint16_t neg = float_to_bf16(float_of(0xFF800001u));
  EXPECT_TRUE(std::isnan(bf16_to_float(neg)));
  EXPECT_TRUE(std::signbit(bf16_to_float(neg)));
  // Subnormals: the smallest bf16 subnormal, a tie below it, a tie between 1 and 2 ulps.
  EXPECT_EQ(float_to_bf16(float_of(0x00010000u)), 0x0001);
  EXPECT_EQ(float_to_bf16(float_of(0x00008000u)), 0x0000);
  EXPECT_EQ(float_to_bf16(float_of(0x00018000u)), 0x0002);
}

TEST(DTypeBF16, EveryCodeRoundTrips) {
  for (uint32_t code = 0; code < 65536; ++code) {
    const uint16_t c = static_cast<uint16_t>(code);
    const float v = bf16_to_float(c);
    EXPECT_EQ(bits_of(v), code << 16);
    if (std::isnan(v)) continue;
    ASSERT_EQ(float_to_bf16(v), c) << "code " << code;
  }
}

TEST(DTypeBF16, MatchesReferenceRounding) {
  for (float x : sample_floats(-140, 128, 2)) {
    expect_same_float(bf16_to_float(float_to_bf16(x)), reference_round(x, kBF16), x);
  }
}

TEST(DTypeF16, RoundsToNearestEvenAndOverflows) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie, even stays
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie, odd rounds up
  EXPECT_EQ(float_to_f16(2.0f - std::ldexp(1.0f, -12)), 0x4000);      // carries into exponent
  EXPECT_EQ(float_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);  // tie with 65536: rounds to infinity
  EXPECT_EQ(float_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(float_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(float_to_f16(kInf), 0x7C00);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(kNaN))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(float_of(0x7F800001u)))));
}

TEST(DTypeF16, Subnormals) {
  const float ulp = std::ldexp(1.0f, -24);
  EXPECT_EQ(float_to_f16(ulp), 0x0001);
  EXPECT_EQ(float_to_f16(ulp / 2), 0x0000);  // tie with 0: even
  EXPECT_EQ(float_to_f16(-ulp / 2), 0x8000);
  EXPECT_EQ(float_to_f16(1.5f * ulp), 0x0002);
  EXPECT_EQ(float_to_f16(1023.5f * ulp), 0x0400);  // largest subnormal rounds to 2^-14
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(f16_to_float(0x03FF), 1023.0f * ulp);
  EXPECT_EQ(f16_to_float(0x8001), -ulp);
}

TEST(DTypeF16, EveryCodeRoundTrips) {
  for (uint32_t code = 0; code < 65536; ++code) {
    const uint16_t c = static_cast<uint16_t>(code);
    const float v = f16_to_float(c);
    const int e = (code >> 10) & 31, m = code & 1023;
    if (e == 31) {
      EXPECT_EQ(std::isnan(v), m != 0) << "code " << code;
      EXPECT_EQ(std::isinf(v), m == 0) << "code " << code;
      continue;
    }
    const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
    ASSERT_EQ(static_cast<double>(v), (code & 0x8000) ? -mag : mag) << "code " << code;
    ASSERT_EQ(float_to_f16(v), c) << "code " << code;
  }
}

TEST(DTypeF16, MatchesReferenceRounding) {
  for (float x : sample_floats(-27, 17, 3)) {
    expect_same_float(f16_to_float(float_to_f16(x)), reference_round(x, kF16), x);
  }
}

}  // namespace
}  // namespace msa
