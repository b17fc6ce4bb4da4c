// The CUDA suite runs the tensor-core prefill kernels wherever they apply (MSA_CUDA_PREFILL=tc,
// docs/api.md), unless whoever runs it set the variable (simt runs the same cases through the
// CUDA-core kernels). Set before main, so every test sees it.
#include <cstdlib>

namespace msa {
namespace test {
namespace {

const int kPrefillKernelChoice = setenv("MSA_CUDA_PREFILL", "tc", /*overwrite=*/0);

}  // namespace
}  // namespace test
}  // namespace msa
