#include "glue.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#if MSA_TORCH_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace msa_torch {
namespace {

// Where shape-only views point: non-null (so optional arguments read as given) and 256-byte
// aligned. Workspace queries never dereference view data.
void* const kPlaceholderData = reinterpret_cast<void*>(uintptr_t{1} << 20);

// Throws c10::ValueError (Python ValueError); [[noreturn]] so callers need no dummy return.
[[noreturn]] void throw_value_error(const std::string& message) {
  TORCH_CHECK_VALUE(false, message);
  std::abort();  // unreachable: TORCH_CHECK_VALUE(false, ...) always throws
}

msa::DType to_msa_dtype(c10::ScalarType t, const char* name) {
  switch (t) {
    case at::kBFloat16:
      return msa::DType::kBF16;
    case at::kHalf:
      return msa::DType::kF16;
    case at::kFloat:
      return msa::DType::kF32;
    case at::kFloat8_e4m3fn:
      return msa::DType::kE4M3;
    case at::kInt:
      return msa::DType::kI32;
    case at::kLong:
      return msa::DType::kI64;
    default:
      break;
  }
  // Every path returns or throws explicitly (no falling off the end of a non-void function).
  throw_value_error(std::string(name) + ": dtype " + std::string(c10::toString(t)) +
                    " is not supported by msa (bfloat16, float16, float32, float8_e4m3fn, "
                    "int32, int64)");
}

}  // namespace

msa::Device to_msa_device(const c10::Device& device) {
  if (device.is_cpu()) return msa::Device::cpu();
  TORCH_CHECK_VALUE(device.is_cuda(), "msa ops run on CPU or CUDA tensors, got device ", device);
  return msa::Device::cuda(device.has_index() ? device.index() : 0);
}

msa::TensorView ViewFactory::operator()(const at::Tensor& t, const char* name) const {
  TORCH_CHECK_VALUE(t.defined(), name, ": undefined tensor");
  // Numbers go through std::to_string: stream-formatting integers inside this extension crashed
  // on the GPU machine (libstdc++ locale state), see src/core/validate.cc.
  TORCH_CHECK_VALUE(t.dim() <= msa::kMaxDims, name,
                    ": " + std::to_string(t.dim()) + " dimensions, msa takes at most " +
                        std::to_string(msa::kMaxDims));
  msa::TensorView v;
  v.dtype = to_msa_dtype(t.scalar_type(), name);
  v.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = t.size(d);
    v.strides[d] = t.stride(d);
  }
  if (shape_only_) {
    v.data = kPlaceholderData;
    v.device = device_;
  } else {
    v.data = t.data_ptr();
    v.device = to_msa_device(t.device());
  }
  return v;
}

msa::TensorView ViewFactory::operator()(const std::optional<at::Tensor>& t,
                                        const char* name) const {
  if (!t.has_value() || !t->defined()) return msa::TensorView();
  return (*this)(*t, name);
}

msa::KvCacheView ViewFactory::kv_cache(const at::Tensor& cache,
                                       const std::optional<at::Tensor>& k_scale,
                                       const std::optional<at::Tensor>& v_scale,
                                       const char* name) const {
  const msa::TensorView view = (*this)(cache, name);
  msa::KvCacheView out;
  if (view.ndim == 4) {
    throw_if_error(msa::make_packed_kv_cache(view, &out), name);
  } else {
    TORCH_CHECK_VALUE(view.ndim == 5, name,
                      ": expected the packed layout [num_blocks, Hkv, block_size, 2 * head_dim] "
                      "(4-D) or the split layout [num_blocks, 2, block_size, Hkv, head_dim] (5-D), "
                      "got " +
                          std::to_string(view.ndim) + " dimensions");
    throw_if_error(msa::make_split_kv_cache(view, &out), name);
  }
  const bool has_k = k_scale.has_value() && k_scale->defined();
  const bool has_v = v_scale.has_value() && v_scale->defined();
  TORCH_CHECK_VALUE(has_k == has_v, name, ": give both k_scale and v_scale, or neither");
  if (!has_k) return out;
  const msa::TensorView ks = (*this)(*k_scale, "k_scale");
  const msa::TensorView vs = (*this)(*v_scale, "v_scale");
  // [] or [1]: one scalar per layer; [Hkv, num_blocks * block_size]: per token and head.
  const msa::KvScaleMode mode =
      ks.ndim <= 1 ? msa::KvScaleMode::kPerLayer : msa::KvScaleMode::kPerTokenHead;
  throw_if_error(msa::set_kv_scales(&out, mode, ks, vs), name);
  return out;
}

void throw_if_error(const msa::Status& status, const char* op) {
  if (status.ok()) return;
  const std::string message = std::string("msa.") + op + ": " + status.to_string();
  switch (status.code()) {
    case msa::StatusCode::kInvalidArgument:
    case msa::StatusCode::kWorkspaceTooSmall:
      throw_value_error(message);
    case msa::StatusCode::kOutOfRange:
      TORCH_CHECK_INDEX(false, message);
      break;
    case msa::StatusCode::kNotSupported:
      TORCH_CHECK_NOT_IMPLEMENTED(false, message);
      break;
    default:
      break;
  }
  TORCH_CHECK(false, message);
}

msa::Workspace to_workspace(const at::Tensor& workspace, const c10::Device& device) {
  TORCH_CHECK_VALUE(workspace.scalar_type() == at::kByte, "workspace: dtype ",
                    workspace.scalar_type(), ", expected uint8");
  TORCH_CHECK_VALUE(workspace.device() == device, "workspace: on ", workspace.device(),
                    ", expected the op's device ", device);
  TORCH_CHECK_VALUE(workspace.is_contiguous(), "workspace: must be contiguous");
  if (workspace.numel() == 0) return msa::Workspace{};
  const auto begin = reinterpret_cast<uintptr_t>(workspace.data_ptr());
  const uintptr_t aligned = (begin + 255) / 256 * 256;
  const auto bytes = static_cast<uintptr_t>(workspace.numel());
  if (aligned - begin >= bytes) return msa::Workspace{};
  return msa::Workspace{reinterpret_cast<void*>(aligned),
                        static_cast<size_t>(bytes - (aligned - begin))};
}

msa::Stream current_stream(const c10::Device& device) {
  if (device.is_cuda()) {
#if MSA_TORCH_WITH_CUDA
    return msa::Stream{c10::cuda::getCurrentCUDAStream(device.index()).stream(), 0};
#else
    TORCH_CHECK_NOT_IMPLEMENTED(false,
                                "msa: this build of the msa extension has no CUDA support "
                                "(rebuild with nvcc available and a CUDA build of torch)");
#endif
  }
  return msa::Stream{nullptr, at::get_num_threads()};
}

}  // namespace msa_torch
