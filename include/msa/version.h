// Library version and build facts.
#pragma once

namespace msa {

const char* version_string();
// True when the library was built with the CUDA backend.
bool built_with_cuda();
// Number of CUDA devices usable by the library (0 without CUDA or without a device).
int cuda_device_count();

}  // namespace msa
