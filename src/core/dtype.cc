#include "msa/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace msa {
namespace {

uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

}  // namespace

uint16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // keep sign, quiet
  // Round to nearest even on the 16 dropped bits; overflow correctly carries into infinity.
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_f16(float x) {
  uint32_t u = float_bits(x);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 2^16
  if (abs < 0x38800000u) {
    // Below the smallest normal 2^-14: a subnormal multiple of 2^-24, rounded to nearest even.
    // Scaling by 2^24 is exact and nearbyint rounds half to even in the default mode.
    float scaled = bits_float(abs) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  uint32_t mant = abs & 0x7FFFFFu;
  uint32_t exp = (abs >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent
  return static_cast<uint16_t>(sign | h);
}

float f16_to_float(uint16_t bits) {
  uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1Fu;
  uint32_t mant = bits & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint8_t float_to_e4m3(float x) {
  uint32_t u = float_bits(x);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7Fu);
  float a = std::fabs(x);
  if (a >= kE4M3Max) return static_cast<uint8_t>(sign | 0x7Eu);  // saturate (inf included)
  if (a < 0.015625f) {
    // Subnormal range (below 2^-6): multiples of 2^-9, rounded to nearest even; 2^-6 itself
    // (code 0x08) is reached by rounding 7.5+ ulps up, which the integer count encodes.
    float q = std::nearbyint(a * 512.0f);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  uint32_t ua = float_bits(a);
  uint32_t exp = (ua >> 23) - 127 + 7;  // 1..15
  uint32_t mant = ua & 0x7FFFFFu;
  uint32_t code = (exp << 3) | (mant >> 20);
  uint32_t rest = mant & 0xFFFFFu;
  if (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ++code;
  return static_cast<uint8_t>(sign | code);
}

float e4m3_to_float(uint8_t bits) {
  bool neg = (bits & 0x80u) != 0;
  uint32_t exp = (bits >> 3) & 0xFu;
  uint32_t mant = bits & 0x7u;
  float v;
  if (exp == 0xF && mant == 0x7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = static_cast<float>(mant) * (1.0f / 512.0f);
  } else {
    v = bits_float(((exp - 7 + 127) << 23) | (mant << 20));
  }
  return neg ? -v : v;
}

}  // namespace msa
