// Host side of the bulk tensor copies: CUtensorMap encoding for the 128-byte-swizzled tiles of
// sm90/hopper.cuh. The driver's encoder is reached through the runtime's entry-point query, so
// the library links no libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "msa/types.h"

namespace msa {
namespace cuda {
namespace sm90 {

// A tiled map over a tensor of `rank` (2..5) dimensions, dimension 0 contiguous: extents
// dims[0..rank), byte strides of dimensions 1..rank-1 in strides[0..rank-1), boxes of
// box[0..rank) elements, 128-byte swizzle (box[0] * element size must be 128 bytes), no
// out-of-bounds handling beyond the dimensions. Returns kNotSupported naming `what` when the
// tensor does not meet TMA's rules (16-byte aligned base and strides, extents below 2^32) or the
// driver refuses it.
Status encode_sw128_map(CUtensorMap* map, const char* what, CUtensorMapDataType type, int rank,
                        const void* base, const uint64_t* dims, const uint64_t* byte_strides,
                        const uint32_t* box);

// Whether a tensor with this base address and byte strides can be described to TMA.
bool tma_compatible(const void* base, const int64_t* byte_strides, int count);

}  // namespace sm90
}  // namespace cuda
}  // namespace msa
