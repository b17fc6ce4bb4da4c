// Conversions between torch tensors and msa views, Status -> Python exceptions, and the
// execution context (current CUDA stream / torch's CPU thread count) of one op call. This is
// the only code of the project that includes torch.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "msa/msa.h"

namespace msa_torch {

// Builds msa::TensorView from tensors without copying. A real factory views the tensor's data;
// a shape-only factory (used to size workspaces, also for meta tensors) gives each view a
// placeholder address that is never dereferenced and the device chosen by the caller.
class ViewFactory {
 public:
  static ViewFactory real() { return ViewFactory(false, msa::Device::cpu()); }
  static ViewFactory shape_only(const msa::Device& device) { return ViewFactory(true, device); }

  // Throws ValueError for dtypes msa does not take or more than msa::kMaxDims dimensions.
  msa::TensorView operator()(const at::Tensor& t, const char* name) const;
  // An undefined view (data == nullptr, "not given") for nullopt.
  msa::TensorView operator()(const std::optional<at::Tensor>& t, const char* name) const;

  // The main KV cache: 4-D = packed [num_blocks, Hkv, block_size, 2 * head_dim], 5-D = split
  // [num_blocks, 2, block_size, Hkv, head_dim] (NHD, or HND through strides). Scales: none,
  // per layer ([] or [1] each) or per token and head ([Hkv, num_blocks * block_size] each).
  msa::KvCacheView kv_cache(const at::Tensor& cache, const std::optional<at::Tensor>& k_scale,
                            const std::optional<at::Tensor>& v_scale, const char* name) const;

 private:
  ViewFactory(bool shape_only, const msa::Device& device)
      : shape_only_(shape_only), device_(device) {}

  bool shape_only_;
  msa::Device device_;
};

// msa::Device of a torch device ("cpu", "cuda:N"); ValueError for other device types.
msa::Device to_msa_device(const c10::Device& device);

// Raises a Python exception for a non-OK status: ValueError (invalid argument, workspace too
// small), IndexError (out of range), NotImplementedError (not supported), RuntimeError
// otherwise. The message is "msa.<op>: <code>: <status message>".
void throw_if_error(const msa::Status& status, const char* op);

// The caller's uint8 workspace tensor on `device`, its start rounded up to 256 bytes.
msa::Workspace to_workspace(const at::Tensor& workspace, const c10::Device& device);

// CUDA: the current torch stream of the device (graph capture included); CPU: torch's intra-op
// thread count.
msa::Stream current_stream(const c10::Device& device);

// Validates and runs one op on `device` with the caller's workspace.
template <typename Args>
void run_op(const char* op, const Args& args, const at::Tensor& workspace,
            const c10::Device& device) {
  throw_if_error(msa::run(args, to_workspace(workspace, device), current_stream(device)), op);
}

// Bytes of workspace one op needs for these shapes.
template <typename Args>
int64_t query_workspace_size(const char* op, const Args& args) {
  size_t bytes = 0;
  throw_if_error(msa::workspace_size(args, &bytes), op);
  return static_cast<int64_t>(bytes);
}

}  // namespace msa_torch
