#include "glue.h"

#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <string>

#if MSA_TORCH_WITH_CUDA
// aoti_torch_get_current_cuda_stream; declared when USE_CUDA is defined (setup.py defines it
// for CUDA builds: the header is already included through torch/csrc/stable/tensor.h).
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#endif

namespace msa_torch {
namespace {

using torch::headeronly::ScalarType;

// Where shape-only views point: non-null (so optional arguments read as given) and 256-byte
// aligned. Workspace queries never dereference view data.
void* const kPlaceholderData = reinterpret_cast<void*>(uintptr_t{1} << 20);

[[noreturn]] void invalid_argument(const std::string& message) {
  throw StatusError(msa::Status(msa::StatusCode::kInvalidArgument, message));
}

msa::DType to_msa_dtype(ScalarType t, const char* name) {
  switch (t) {
    case ScalarType::BFloat16:
      return msa::DType::kBF16;
    case ScalarType::Half:
      return msa::DType::kF16;
    case ScalarType::Float:
      return msa::DType::kF32;
    case ScalarType::Float8_e4m3fn:
      return msa::DType::kE4M3;
    case ScalarType::Int:
      return msa::DType::kI32;
    case ScalarType::Long:
      return msa::DType::kI64;
    default:
      break;
  }
  invalid_argument(std::string(name) + ": dtype " + torch::headeronly::toString(t) +
                   " is not supported by msa (bfloat16, float16, float32, float8_e4m3fn, "
                   "int32, int64)");
}

}  // namespace

void throw_if_error(const msa::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

msa::Device device_of(const Tensor& t) {
  if (t.is_cpu()) return msa::Device::cpu();
  if (!t.is_cuda()) invalid_argument("msa ops run on CPU or CUDA tensors");
  return msa::Device::cuda(static_cast<int>(t.get_device_index()));
}

msa::Device parse_device(const std::string& device) {
  if (device == "cpu") return msa::Device::cpu();
  if (device == "cuda") return msa::Device::cuda(0);
  const std::string prefix = "cuda:";
  if (device.compare(0, prefix.size(), prefix) == 0 && device.size() > prefix.size() &&
      device.find_first_not_of("0123456789", prefix.size()) == std::string::npos) {
    return msa::Device::cuda(std::stoi(device.substr(prefix.size())));
  }
  invalid_argument("device: \"" + device + "\", expected \"cpu\", \"cuda\" or \"cuda:N\"");
}

msa::TensorView ViewFactory::operator()(const Tensor& t, const char* name) const {
  if (!t.defined()) invalid_argument(std::string(name) + ": undefined tensor");
  // Numbers go through std::to_string: stream-formatting integers inside this extension crashed
  // on the GPU machine (libstdc++ locale state), see src/core/validate.cc.
  if (t.dim() > msa::kMaxDims) {
    invalid_argument(std::string(name) + ": " + std::to_string(t.dim()) +
                     " dimensions, msa takes at most " + std::to_string(msa::kMaxDims));
  }
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
    v.device = device_of(t);
  }
  return v;
}

msa::TensorView ViewFactory::operator()(const OptTensor& t, const char* name) const {
  if (!t.has_value() || !t->defined()) return msa::TensorView();
  return (*this)(*t, name);
}

msa::KvCacheView ViewFactory::kv_cache(const Tensor& cache, const OptTensor& k_scale,
                                       const OptTensor& v_scale, const char* name) const {
  const msa::TensorView view = (*this)(cache, name);
  msa::KvCacheView out;
  if (view.ndim == 4) {
    throw_if_error(msa::make_packed_kv_cache(view, &out));
  } else if (view.ndim == 5) {
    throw_if_error(msa::make_split_kv_cache(view, &out));
  } else {
    invalid_argument(std::string(name) +
                     ": expected the packed layout [num_blocks, Hkv, block_size, 2 * head_dim] "
                     "(4-D) or the split layout [num_blocks, 2, block_size, Hkv, head_dim] (5-D), "
                     "got " +
                     std::to_string(view.ndim) + " dimensions");
  }
  const bool has_k = k_scale.has_value() && k_scale->defined();
  const bool has_v = v_scale.has_value() && v_scale->defined();
  if (has_k != has_v)
    invalid_argument(std::string(name) + ": give both k_scale and v_scale, or neither");
  if (!has_k) return out;
  const msa::TensorView ks = (*this)(*k_scale, "k_scale");
  const msa::TensorView vs = (*this)(*v_scale, "v_scale");
  // [] or [1]: one scalar per layer; [Hkv, num_blocks * block_size]: per token and head.
  const msa::KvScaleMode mode =
      ks.ndim <= 1 ? msa::KvScaleMode::kPerLayer : msa::KvScaleMode::kPerTokenHead;
  throw_if_error(msa::set_kv_scales(&out, mode, ks, vs));
  return out;
}

msa::Workspace to_workspace(const Tensor& workspace, const msa::Device& device) {
  if (workspace.scalar_type() != ScalarType::Byte) {
    invalid_argument(std::string("workspace: dtype ") +
                     torch::headeronly::toString(workspace.scalar_type()) + ", expected uint8");
  }
  if (device_of(workspace) != device) invalid_argument("workspace: not on the op's device");
  if (!workspace.is_contiguous()) invalid_argument("workspace: must be contiguous");
  if (workspace.numel() == 0) return msa::Workspace{};
  const auto begin = reinterpret_cast<uintptr_t>(workspace.data_ptr());
  const uintptr_t aligned = (begin + 255) / 256 * 256;
  const auto bytes = static_cast<uintptr_t>(workspace.numel());
  if (aligned - begin >= bytes) return msa::Workspace{};
  return msa::Workspace{reinterpret_cast<void*>(aligned),
                        static_cast<size_t>(bytes - (aligned - begin))};
}

msa::Stream current_stream(const msa::Device& device) {
  if (device.is_cuda()) {
#if MSA_TORCH_WITH_CUDA
    void* stream = nullptr;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device.index, &stream));
    return msa::Stream{stream, 0};
#else
    throw StatusError(msa::Status(msa::StatusCode::kNotSupported,
                                  "this build of the msa extension has no CUDA support "
                                  "(rebuild with nvcc available and a CUDA build of torch)"));
#endif
  }
  return msa::Stream{nullptr, static_cast<int>(torch::stable::get_num_threads())};
}

}  // namespace msa_torch
