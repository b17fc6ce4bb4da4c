#include "msa/version.h"

#if MSA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace msa {

const char* version_string() { return MSA_VERSION_STRING; }

bool built_with_cuda() { return MSA_WITH_CUDA != 0; }

int cuda_device_count() {
#if MSA_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

}  // namespace msa
