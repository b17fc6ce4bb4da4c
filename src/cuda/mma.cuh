// Warp-level tensor-core building blocks shared by the decode kernels (sparse attention, index
// scorers): the m16n8k16 MMA with fp32 accumulators, ldmatrix from shared memory, packing of
// fp32 pairs into 16-bit MMA words, and exact e4m3 -> f16 / bf16 pair conversions. The operand
// layouts the kernels build from these are described with the kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace msa {
namespace cuda {

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// d += A B for one m16n8k16 tile, fp32 accumulators: A (16 x 16, row) in four words a0..a3, B
// (16 x 8, col) in two, each word a pair of f16 (kF16) or bf16 elements, the lower element in the
// lower half. Not volatile: the instruction has no side effects, so ptxas schedules it as it does
// arithmetic.
template <bool kF16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (kF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}
template <bool kF16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint4& a, uint32_t b0,
                                             uint32_t b1) {
  mma_m16n8k16<kF16>(d, a.x, a.y, a.z, a.w, b0, b1);
}
template <bool kF16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint2 b) {
  mma_m16n8k16<kF16>(d, a[0], a[1], a[2], a[3], b.x, b.y);
}

// Four 8x8 16-bit matrices from shared memory (lane l gives the row address of matrix l / 8);
// _trans transposes each.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// Two floats as one MMA word (round to nearest even), lo in the lower half: f16 (kF16) or bf16.
template <bool kF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kF16) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Two e4m3 elements -> an f16 pair, exactly (e4m3's 3-bit mantissa and exponents 2^-9..2^8 all
// fit f16, NaN stays NaN), in one instruction: the element in the pair's lower byte goes to the
// lower half. kHigh picks the word's upper pair, which the conversion reads in place (no shift).
template <bool kHigh>
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v) {
  uint32_t r;
  if constexpr (kHigh) {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}"
        : "=r"(r)
        : "r"(v));
  } else {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}"
        : "=r"(r)
        : "r"(v));
  }
  return r;
}

// 16 e4m3 values (one 16-byte word) -> 16 f16 values in two 16-byte words, exactly.
__device__ __forceinline__ void e4m3x16_to_f16(uint4 in, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {in.x, in.y, in.z, in.w};
  uint32_t h[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    h[2 * i] = e4m3x2_to_f16x2<false>(w[i]);
    h[2 * i + 1] = e4m3x2_to_f16x2<true>(w[i]);
  }
  lo = make_uint4(h[0], h[1], h[2], h[3]);
  hi = make_uint4(h[4], h[5], h[6], h[7]);
}

// The lower two e4m3 elements of v -> a bf16 pair, exactly (through f16 and f32: there is no
// direct conversion).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t v) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xFFFFu), __NV_E4M3);
  const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(__half2(h)));
  return *reinterpret_cast<const uint32_t*>(&b);
}

}  // namespace cuda
}  // namespace msa
