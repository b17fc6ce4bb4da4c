// CPU builder of the RoPE cos/sin table: angles and their cos/sin in fp64, rounded once to fp32,
// so large positions (up to 1M and beyond) keep full fp32 precision. One row per position, each
// computed by one thread.
#include <cmath>
#include <cstdint>

#include "core/thread_pool.h"
#include "msa/fused_qknorm_rope.h"

namespace msa {
namespace cpu {

Status workspace_size(const RopeCacheArgs&, size_t* bytes) {
  *bytes = 0;
  return Status::Ok();
}

Status run(const RopeCacheArgs& args, Workspace, Stream stream) {
  const TensorView& out = args.cos_sin_out;
  const int64_t rotary_dim = out.shape[1];
  const int64_t half = rotary_dim / 2;
  float* data = out.ptr<float>();
  return detail::parallel_for(out.shape[0], stream, [&](int64_t begin, int64_t end, int) {
    for (int64_t p = begin; p < end; ++p) {
      float* row = data + p * out.strides[0];
      for (int64_t i = 0; i < half; ++i) {
        const double freq =
            std::pow(args.theta, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim));
        const double angle = static_cast<double>(p) * freq;
        row[i * out.strides[1]] = static_cast<float>(std::cos(angle));
        row[(half + i) * out.strides[1]] = static_cast<float>(std::sin(angle));
      }
    }
  });
}

}  // namespace cpu
}  // namespace msa
