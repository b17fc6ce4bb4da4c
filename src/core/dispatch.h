// Routes a validated op to the backend of its device. Never falls back to another backend.
#pragma once

#include "core/backends.h"
#include "core/validate.h"

namespace msa {
namespace detail {

template <typename Args>
Status dispatch_workspace_size(const Args& args, const Device& device, size_t* bytes) {
  if (bytes == nullptr) return invalid("bytes: null output pointer");
  if (device.is_cpu()) return cpu::workspace_size(args, bytes);
#if MSA_WITH_CUDA
  return cuda::workspace_size(args, bytes);
#else
  return not_supported(
      "tensors are on a CUDA device but this build of msa has no CUDA "
      "backend (configure with -DMSA_WITH_CUDA=ON)");
#endif
}

template <typename Args>
Status dispatch_run(const Args& args, const Device& device, Workspace workspace, Stream stream) {
  if (device.is_cpu()) return cpu::run(args, workspace, stream);
#if MSA_WITH_CUDA
  return cuda::run(args, workspace, stream);
#else
  (void)workspace;
  (void)stream;
  return not_supported(
      "tensors are on a CUDA device but this build of msa has no CUDA "
      "backend (configure with -DMSA_WITH_CUDA=ON)");
#endif
}

}  // namespace detail
}  // namespace msa
