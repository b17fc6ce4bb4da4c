// Exact host conversions between float and the 16- and 8-bit storage types.
// Storage values are carried as raw bit patterns (uint16_t / uint8_t).
#pragma once

#include <cstdint>

namespace msa {

// bf16: round-to-nearest-even; NaN stays NaN (quiet), infinities and signed zero are kept.
uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t bits);

// IEEE binary16: round-to-nearest-even, overflow to infinity, subnormals kept.
uint16_t float_to_f16(float x);
float f16_to_float(uint16_t bits);

// OCP float8 e4m3fn (bias 7, no infinities, finite max 448, NaN = 0x7F / 0xFF).
// Round-to-nearest-even, values beyond +-448 (infinities included) saturate to +-448,
// NaN maps to NaN with its sign, subnormals down to 2^-9 are kept.
uint8_t float_to_e4m3(float x);
float e4m3_to_float(uint8_t bits);

constexpr float kE4M3Max = 448.0f;

}  // namespace msa
