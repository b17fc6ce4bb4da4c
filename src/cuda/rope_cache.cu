// CUDA backend of the RoPE cos/sin table op (spec A11): one thread per table element, angles in
// fp64 so positions up to 1M keep their precision, rounded once to fp32.
#include <algorithm>

#include "core/backends.h"
#include "core/validate.h"
#include "cuda/common.cuh"

namespace msa {
namespace cuda {
namespace {

__global__ void rope_cache_kernel(float* out, int64_t row_stride, int64_t col_stride,
                                  int64_t max_pos, int rotary_dim, double theta) {
  const int half = rotary_dim / 2;
  const int64_t n = max_pos * half;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = e / half;
    const int i = static_cast<int>(e % half);
    const double freq = pow(theta, -2.0 * i / rotary_dim);
    const double angle = static_cast<double>(p) * freq;
    double s, c;
    sincos(angle, &s, &c);
    out[p * row_stride + i * col_stride] = static_cast<float>(c);
    out[p * row_stride + (half + i) * col_stride] = static_cast<float>(s);
  }
}

}  // namespace

Status workspace_size(const RopeCacheArgs&, size_t* bytes) {
  *bytes = 0;
  return Status::Ok();
}

Status run(const RopeCacheArgs& args, Workspace, Stream stream) {
  const TensorView& t = args.cos_sin_out;
  const int64_t max_pos = t.shape[0];
  const int rotary_dim = static_cast<int>(t.shape[1]);
  const int64_t n = max_pos * (rotary_dim / 2);
  if (n == 0) return Status::Ok();
  constexpr int kThreads = 256;
  // Grid-stride loop: the grid is capped so huge tables do not need a huge grid.
  const unsigned int blocks = std::min<unsigned int>(blocks_for(n, kThreads), 65536u);
  return launch_kernel("rope_cache_kernel", rope_cache_kernel, dim3(blocks), dim3(kThreads), 0,
                       stream_of(stream), t.ptr<float>(), t.strides[0], t.strides[1], max_pos,
                       rotary_dim, args.theta);
}

}  // namespace cuda
}  // namespace msa
