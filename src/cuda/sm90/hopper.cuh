// Hopper (sm_90a) building blocks of the tensor-core prefill kernels: shared-memory matrix
// descriptors for the 128-byte swizzle, warpgroup MMA (wgmma) calls, transaction barriers, bulk
// tensor copies (TMA) and warpgroup register reconfiguration. The instructions come from
// CUTLASS/CuTe (cute::SM90::GMMA, cute::SM90_TMA_LOAD_*, cutlass::arch barriers); what is ours is
// the tile geometry the kernels agree on, stated once here.
//
// Tile geometry. Every operand tile in shared memory is a stack of 128-byte rows in the 128-byte
// swizzle that TMA's CU_TENSOR_MAP_SWIZZLE_128B writes: byte (row, b) of a panel lives at
// row * 128 + (((b / 16) ^ (row % 8)) * 16) + b % 16, panels 1024-byte aligned. A 16-bit tile
// of R rows x 128 elements is two panels (columns 0-63, then 64-127), each R x 128 bytes; an
// e4m3 tile of R x 128 (as a bulk copy lands it, before its conversion to 16 bits) is one panel.
// wgmma reads the 16-bit tiles through descriptors:
//   * K-major operands (Q, K, index keys: the reduction dimension contiguous): leading byte
//     offset 16 (unused with swizzling), stride byte offset 1024 (8 rows); a 16-element k-step
//     advances the start by 32 bytes within a panel, and the fifth k-step starts the second
//     panel;
//   * MN-major V (as the B operand of P.V, N = head dim contiguous): leading byte offset = the
//     panel size (the next 64 head-dim columns), stride byte offset 1024 (8 keys); a 16-key
//     k-step advances the start by 16 rows = 2048 bytes.
// These are what cute::SM90::GMMA::make_gmma_desc computes for tile_to_shape of
// Layout_K_SW128_Atom (and its transposed composition for V).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>

#include "cuda/mma.cuh"

namespace msa {
namespace cuda {
namespace sm90 {

namespace gmma = cute::SM90::GMMA;

constexpr int kPanelRowBytes = 128;
constexpr int kSwizzleAtomBytes = 1024;  // 8 rows of 128 bytes

using cuda::smem_addr;

// The dynamic shared memory `raw` advanced to the next kSwizzleAtomBytes boundary (what 128-byte
// swizzled tiles need), by pointer arithmetic on the __shared__ array itself: a pointer rebuilt
// from a rounded integer loses its address space, and every access through it compiles to a
// generic LD/ST with a 64-bit address instead of LDS/STS.
__device__ __forceinline__ uint8_t* align_dynamic_smem(uint8_t* raw) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  return raw + ((kSwizzleAtomBytes - (a & (kSwizzleAtomBytes - 1u))) & (kSwizzleAtomBytes - 1u));
}

// Byte offset of the 16-byte chunk `chunk` (0..7) of row `row` in a swizzled panel.
__device__ __forceinline__ uint32_t swizzled_chunk(uint32_t row, uint32_t chunk) {
  return row * kPanelRowBytes + ((chunk ^ (row & 7u)) << 4);
}

// A wgmma shared-memory descriptor for the 128-byte swizzle (layout type 1 in bits 62-63).
// Offsets in bytes, multiples of 16.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t smem_byte_addr, uint32_t leading_bytes,
                                               uint32_t stride_bytes) {
  return (uint64_t{1} << 62) | (static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32) |
         (static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16) |
         static_cast<uint64_t>((smem_byte_addr >> 4) & 0x3FFF);
}

// Descriptor of k-step `kk` of a K-major 16-bit tile of `rows` rows (two panels).
__device__ __forceinline__ uint64_t kmajor16_desc(uint32_t tile_addr, int rows, int kk) {
  const uint32_t panel = static_cast<uint32_t>(kk >> 2) * static_cast<uint32_t>(rows) * 128u;
  return sw128_desc(tile_addr + panel + static_cast<uint32_t>(kk & 3) * 32u, 16, 1024);
}

// Descriptor of 16-key step `kk` of a 16-bit V tile of `rows` keys read MN-major.
__device__ __forceinline__ uint64_t mnmajor16_desc(uint32_t tile_addr, int rows, int kk) {
  return sw128_desc(tile_addr + static_cast<uint32_t>(kk) * 2048u,
                    static_cast<uint32_t>(rows) * 128u, 1024);
}

// 16-bit element type tag of the MMAs: bf16 or f16 operands, fp32 accumulators.
enum class Mma16 { kBF16, kF16 };

// acc (64 fp32, the m64n128 accumulator fragment) (+)= A(smem) * B(smem)^T, one k16 step.
// B is K-major (kTransB false) or MN-major (true).
template <Mma16 kType, bool kTransB, size_t... I>
__device__ __forceinline__ void mma_ss_impl(uint64_t a, uint64_t b, float (&acc)[64],
                                            gmma::ScaleOut scale, std::index_sequence<I...>) {
  constexpr auto kMajB = kTransB ? gmma::Major::MN : gmma::Major::K;
  if constexpr (kType == Mma16::kBF16) {
    gmma::MMA_64x128x16_F32BF16BF16_SS<gmma::Major::K, kMajB>::fma(a, b, acc[I]..., scale);
  } else {
    gmma::MMA_64x128x16_F32F16F16_SS<gmma::Major::K, kMajB>::fma(a, b, acc[I]..., scale);
  }
}
template <Mma16 kType, bool kTransB>
__device__ __forceinline__ void mma_ss(uint64_t a, uint64_t b, float (&acc)[64],
                                       gmma::ScaleOut scale) {
  mma_ss_impl<kType, kTransB>(a, b, acc, scale, std::make_index_sequence<64>{});
}

// acc += A(registers: 4 words of 16-bit pairs, the k16 A fragment) * B(smem), B MN-major.
template <Mma16 kType, size_t... I>
__device__ __forceinline__ void mma_rs_impl(const uint32_t (&a)[4], uint64_t b, float (&acc)[64],
                                            std::index_sequence<I...>) {
  if constexpr (kType == Mma16::kBF16) {
    gmma::MMA_64x128x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::MN>::fma(
        a[0], a[1], a[2], a[3], b, acc[I]..., gmma::ScaleOut::One);
  } else {
    gmma::MMA_64x128x16_F32F16F16_RS<gmma::Major::K, gmma::Major::MN>::fma(
        a[0], a[1], a[2], a[3], b, acc[I]..., gmma::ScaleOut::One);
  }
}
template <Mma16 kType>
__device__ __forceinline__ void mma_rs(const uint32_t (&a)[4], uint64_t b, float (&acc)[64]) {
  mma_rs_impl<kType>(a, b, acc, std::make_index_sequence<64>{});
}

// Orders the accumulator registers against the asynchronous MMAs (cute::warpgroup_fence_operand
// on each of them).
__device__ __forceinline__ void fence_acc(float (&acc)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) cute::warpgroup_fence_operand(acc[i]);
}

__device__ __forceinline__ void mma_begin() { cute::warpgroup_arrive(); }
__device__ __forceinline__ void mma_commit() { cute::warpgroup_commit_batch(); }
template <int kPending>
__device__ __forceinline__ void mma_wait() {
  cute::warpgroup_wait<kPending>();
}

// Accumulator fragment geometry of m64nN (per warpgroup thread t): element i of acc is at row
// acc_row(t, i) and column acc_col(t, i) of the 64 x N tile.
__device__ __forceinline__ int acc_row(int t, int i) {
  return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((i >> 1) & 1);
}
__device__ __forceinline__ int acc_col(int t, int i) {
  return 8 * (i >> 2) + 2 * (t & 3) + (i & 1);
}

// Transaction barriers in shared memory.
using Barrier = cutlass::arch::ClusterTransactionBarrier;

__device__ __forceinline__ void barrier_init(uint64_t* bar, uint32_t count) {
  cutlass::arch::ClusterBarrier::init(bar, count);
}
__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t phase) {
  cutlass::arch::ClusterBarrier::wait(bar, phase);
}
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
  cutlass::arch::ClusterBarrier::arrive(bar);
}
__device__ __forceinline__ void barrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  Barrier::arrive_and_expect_tx(bar, bytes);
}
// Makes initialised barriers visible to the async proxy (TMA) before the CTA barrier that
// follows.
__device__ __forceinline__ void barrier_init_fence() { cutlass::arch::fence_barrier_init(); }

// Generic-proxy shared-memory writes (st.shared) made visible to the async proxy (wgmma, TMA):
// every writing thread runs this before the barrier that hands the data over.
__device__ __forceinline__ void fence_async_shared() { cutlass::arch::fence_view_async_shared(); }

// A barrier over `threads` threads (multiple of 32) of the CTA, id 1..15 (id 0 is
// __syncthreads).
__device__ __forceinline__ void named_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" : : "r"(id), "r"(threads) : "memory");
}

// Bulk tensor copies into shared memory, completing on `bar`, with the normal L2 eviction policy
// (the instruction form CuTe emits takes an explicit cache policy).
constexpr uint64_t kEvictNormal = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);
__device__ __forceinline__ void tma_load_3d(const void* map, uint64_t* bar, void* smem, int32_t c0,
                                            int32_t c1, int32_t c2) {
  cute::SM90_TMA_LOAD_3D::copy(map, bar, kEvictNormal, smem, c0, c1, c2);
}
__device__ __forceinline__ void tma_load_4d(const void* map, uint64_t* bar, void* smem, int32_t c0,
                                            int32_t c1, int32_t c2, int32_t c3) {
  cute::SM90_TMA_LOAD_4D::copy(map, bar, kEvictNormal, smem, c0, c1, c2, c3);
}
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  cute::prefetch_tma_descriptor(static_cast<const cute::TmaDescriptor*>(map));
}

template <uint32_t kRegs>
__device__ __forceinline__ void regs_alloc() {
  cutlass::arch::warpgroup_reg_alloc<kRegs>();
}
template <uint32_t kRegs>
__device__ __forceinline__ void regs_dealloc() {
  cutlass::arch::warpgroup_reg_dealloc<kRegs>();
}

// 16-bit packing of two floats (round to nearest even), lower element in the lower half.
template <Mma16 kType>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (kType == Mma16::kBF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace msa
