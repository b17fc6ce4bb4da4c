// Conversions between torch tensors and msa views, and the execution context (current CUDA
// stream / torch's CPU thread count) of one op call. This and ops.cpp are the only code of the
// project that includes torch, and they use only torch's stable ABI (torch/csrc/stable and
// torch/headeronly, built with TORCH_TARGET_VERSION): one build of the extension loads into
// every torch from that version on.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "msa/msa.h"

namespace msa_torch {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

// Carries a non-OK msa::Status out of the glue; the op kernel rethrows it as
// std::runtime_error("msa.<op>: <status code name>: <message>"), the form msa/_ops.py turns
// into ValueError, IndexError, NotImplementedError or RuntimeError.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(msa::Status status)
      : std::runtime_error(status.to_string()), status_(std::move(status)) {}
  const msa::Status& status() const { return status_; }

 private:
  msa::Status status_;
};

// Throws StatusError for a non-OK status.
void throw_if_error(const msa::Status& status);

// Builds msa::TensorView from tensors without copying. A real factory views the tensor's data;
// a shape-only factory (used to size workspaces, also for meta tensors) gives each view a
// placeholder address that is never dereferenced and the device chosen by the caller.
class ViewFactory {
 public:
  static ViewFactory real() { return ViewFactory(false, msa::Device::cpu()); }
  static ViewFactory shape_only(const msa::Device& device) { return ViewFactory(true, device); }

  // Invalid argument for dtypes msa does not take or more than msa::kMaxDims dimensions.
  msa::TensorView operator()(const Tensor& t, const char* name) const;
  // An undefined view (data == nullptr, "not given") for nullopt.
  msa::TensorView operator()(const OptTensor& t, const char* name) const;

  // The main KV cache: 4-D = packed [num_blocks, Hkv, block_size, 2 * head_dim], 5-D = split
  // [num_blocks, 2, block_size, Hkv, head_dim] (NHD, or HND through strides). Scales: none,
  // per layer ([] or [1] each) or per token and head ([Hkv, num_blocks * block_size] each).
  msa::KvCacheView kv_cache(const Tensor& cache, const OptTensor& k_scale, const OptTensor& v_scale,
                            const char* name) const;

 private:
  ViewFactory(bool shape_only, const msa::Device& device)
      : shape_only_(shape_only), device_(device) {}

  bool shape_only_;
  msa::Device device_;
};

// msa::Device of a tensor's device; invalid argument for devices other than CPU and CUDA.
msa::Device device_of(const Tensor& t);
// msa::Device of a device string ("cpu", "cuda", "cuda:N", "meta" is not one).
msa::Device parse_device(const std::string& device);

// The caller's uint8 workspace tensor on `device`, its start rounded up to 256 bytes.
msa::Workspace to_workspace(const Tensor& workspace, const msa::Device& device);

// CUDA: the current torch stream of the device (graph capture included); CPU: torch's intra-op
// thread count.
msa::Stream current_stream(const msa::Device& device);

}  // namespace msa_torch
