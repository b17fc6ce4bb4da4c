// Device-side synthesis of the fused activation rows and digests of the attention outputs, for
// the CUDA backend of the runner (same functions as the host path, from engine/synth.h).
#pragma once

#include <cstdint>

#include "engine/synth.h"
#include "msa/types.h"

namespace msa {
namespace engine {

// qkv[t, :] (bf16 bits, row-major, shape.width() columns) for tokens t < T of request
// request_ids[t] at positions[t]; all pointers are device pointers. Queued on the default
// stream.
Status launch_synthesize_rows(uint64_t seed, const synth::RowShape& shape, int layer,
                              const int64_t* request_ids, const int64_t* positions, int64_t T,
                              uint16_t* qkv);

// digests[t] = fold_digest(digests[t], row_digest(out + t * row_len, row_len), layer).
Status launch_fold_digests(const float* out, int64_t T, int row_len, int layer, uint64_t* digests);

}  // namespace engine
}  // namespace msa
