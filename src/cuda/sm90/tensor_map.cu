#include "cuda/sm90/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <mutex>
#include <string>

namespace msa {
namespace cuda {
namespace sm90 {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    } else {
      (void)cudaGetLastError();
    }
  });
  return fn;
}

}  // namespace

bool tma_compatible(const void* base, const int64_t* byte_strides, int count) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  for (int i = 0; i < count; ++i) {
    if (byte_strides[i] <= 0 || byte_strides[i] % 16 != 0 || byte_strides[i] >= (int64_t{1} << 40))
      return false;
  }
  return true;
}

Status encode_sw128_map(CUtensorMap* map, const char* what, CUtensorMapDataType type, int rank,
                        const void* base, const uint64_t* dims, const uint64_t* byte_strides,
                        const uint32_t* box) {
  const auto fn = encoder();
  if (fn == nullptr) {
    return Status(StatusCode::kNotSupported,
                  std::string(what) + ": the CUDA driver offers no cuTensorMapEncodeTiled");
  }
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] >= (uint64_t{1} << 32)) {
      return Status(StatusCode::kNotSupported, std::string(what) + ": extent of dimension " +
                                                   std::to_string(i) + " outside TMA's range");
    }
  }
  cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r =
      fn(map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims, byte_strides, box,
         elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status(StatusCode::kNotSupported,
                  std::string(what) + ": cuTensorMapEncodeTiled refused the tensor (CUresult " +
                      std::to_string(static_cast<int>(r)) + ")");
  }
  return Status::Ok();
}

}  // namespace sm90
}  // namespace cuda
}  // namespace msa
