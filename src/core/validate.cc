#include "core/validate.h"

#include <cstdint>
#include <string>

namespace msa {
namespace detail {

Status invalid(const std::string& msg) { return Status(StatusCode::kInvalidArgument, msg); }
Status out_of_range(const std::string& msg) { return Status(StatusCode::kOutOfRange, msg); }
Status not_supported(const std::string& msg) { return Status(StatusCode::kNotSupported, msg); }

// Plain string building, no iostreams: the library is also linked into Python extensions whose
// process may hold another libstdc++'s locale state, and stream formatting crashed there (seen
// with torch 2.11 on the GPU machine).
std::string shape_string(const TensorView& t) {
  if (!t.valid_rank()) return "[invalid rank " + std::to_string(t.ndim) + "]";
  std::string out = "[";
  for (int d = 0; d < t.ndim; ++d) {
    if (d) out += ", ";
    out += std::to_string(t.shape[d]);
  }
  return out + "]";
}

Status checked_mul(int64_t a, int64_t b, const std::string& what, int64_t* out) {
  if (__builtin_mul_overflow(a, b, out)) {
    return invalid(what + ": " + std::to_string(a) + " * " + std::to_string(b) +
                   " does not fit int64");
  }
  return Status::Ok();
}

Status checked_add(int64_t a, int64_t b, const std::string& what, int64_t* out) {
  if (__builtin_add_overflow(a, b, out)) {
    return invalid(what + ": " + std::to_string(a) + " + " + std::to_string(b) +
                   " does not fit int64");
  }
  return Status::Ok();
}

Status require_defined(const TensorView& t, const char* name) {
  if (!t.defined()) return invalid(std::string(name) + ": required tensor is missing (null data)");
  return Status::Ok();
}

Status require_ndim(const TensorView& t, const char* name, int ndim) {
  MSA_RETURN_IF_ERROR(require_defined(t, name));
  MSA_RETURN_IF_ERROR(require_valid_layout(t, name));
  if (t.ndim != ndim) {
    return invalid(std::string(name) + ": expected " + std::to_string(ndim) +
                   " dimensions, got shape " + shape_string(t));
  }
  return Status::Ok();
}

Status require_dim(const TensorView& t, const char* name, int d, int64_t expected,
                   const char* what) {
  if (t.shape[d] != expected) {
    return invalid(std::string(name) + ": shape[" + std::to_string(d) + "] is " +
                   std::to_string(t.shape[d]) + ", expected " + what + " = " +
                   std::to_string(expected) + " (shape " + shape_string(t) + ")");
  }
  return Status::Ok();
}

Status require_dim_at_least(const TensorView& t, const char* name, int d, int64_t minimum,
                            const char* what) {
  if (t.shape[d] < minimum) {
    return invalid(std::string(name) + ": shape[" + std::to_string(d) + "] is " +
                   std::to_string(t.shape[d]) + ", expected at least " + what + " = " +
                   std::to_string(minimum) + " (shape " + shape_string(t) + ")");
  }
  return Status::Ok();
}

Status require_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed) {
  std::string list;
  for (DType a : allowed) {
    if (t.dtype == a) return Status::Ok();
    list += (list.empty() ? "" : " or ") + std::string(dtype_name(a));
  }
  return invalid(std::string(name) + ": dtype is " + dtype_name(t.dtype) + ", expected " + list);
}

Status require_device(const TensorView& t, const char* name, const Device& device) {
  if (t.device != device) {
    auto dev = [](const Device& d) {
      return d.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index);
    };
    return invalid(std::string(name) + ": on " + dev(t.device) + ", expected " + dev(device) +
                   " like the other tensors of the call");
  }
  return Status::Ok();
}

Status require_unit_last_stride(const TensorView& t, const char* name) {
  MSA_RETURN_IF_ERROR(require_valid_layout(t, name));
  if (t.ndim > 0 && t.shape[t.ndim - 1] > 1 && t.strides[t.ndim - 1] != 1) {
    return invalid(std::string(name) + ": innermost stride is " +
                   std::to_string(t.strides[t.ndim - 1]) + ", expected 1");
  }
  return Status::Ok();
}

Status require_valid_layout(const TensorView& t, const char* name) {
  if (!t.valid_rank()) {
    return invalid(std::string(name) + ": ndim " + std::to_string(t.ndim) +
                   " outside [0, 6] (make_tensor and the view helpers give ndim -1 for more "
                   "than 6 dimensions, mismatched strides or a dimension outside the view)");
  }
  if ((!t.device.is_cpu() && !t.device.is_cuda()) || t.device.index < 0) {
    return invalid(std::string(name) + ": device type " +
                   std::to_string(static_cast<int>(t.device.type)) + " index " +
                   std::to_string(t.device.index) + " is neither the CPU nor a CUDA device");
  }
  int64_t last = 0;  // element offset of the last element
  bool empty = false;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0 || t.strides[d] < 0) {
      return invalid(std::string(name) + ": negative shape or stride in dimension " +
                     std::to_string(d));
    }
    int64_t reach = 0;
    if (t.shape[d] == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &reach) ||
               __builtin_add_overflow(last, reach, &last)) {
      return invalid(std::string(name) + ": shape " + shape_string(t) +
                     " with its strides spans more than int64 elements");
    }
  }
  int64_t bytes = 0;
  if (!empty && (__builtin_add_overflow(last, 1, &bytes) ||
                 __builtin_mul_overflow(bytes, dtype_size(t.dtype), &bytes))) {
    return invalid(std::string(name) + ": shape " + shape_string(t) +
                   " with its strides spans more than int64 bytes");
  }
  return Status::Ok();
}

Status check_error_flags(const TensorView& t, const Device& device) {
  if (!t.defined()) return Status::Ok();
  MSA_RETURN_IF_ERROR(require_ndim(t, "error_flags", 1));
  MSA_RETURN_IF_ERROR(require_dim(t, "error_flags", 0, 1, "one flag word"));
  MSA_RETURN_IF_ERROR(require_dtype(t, "error_flags", {DType::kI32}));
  return require_device(t, "error_flags", device);
}

Status check_kv_cache(const KvCacheView& c, const char* name, const Device& device) {
  const std::string n(name);
  const std::string kn = n + ".k", vn = n + ".v";
  MSA_RETURN_IF_ERROR(require_ndim(c.k, kn.c_str(), 4));
  MSA_RETURN_IF_ERROR(require_ndim(c.v, vn.c_str(), 4));
  for (int d = 0; d < 4; ++d) {
    if (c.k.shape[d] != c.v.shape[d]) {
      return invalid(vn + ": shape " + shape_string(c.v) + " differs from " + kn + " shape " +
                     shape_string(c.k));
    }
  }
  MSA_RETURN_IF_ERROR(require_dtype(c.k, kn.c_str(), {DType::kBF16, DType::kF16, DType::kE4M3}));
  if (c.v.dtype != c.k.dtype) {
    return invalid(vn + ": dtype " + dtype_name(c.v.dtype) + " differs from " + kn + " dtype " +
                   dtype_name(c.k.dtype));
  }
  MSA_RETURN_IF_ERROR(require_device(c.k, kn.c_str(), device));
  MSA_RETURN_IF_ERROR(require_device(c.v, vn.c_str(), device));
  MSA_RETURN_IF_ERROR(require_unit_last_stride(c.k, kn.c_str()));
  MSA_RETURN_IF_ERROR(require_unit_last_stride(c.v, vn.c_str()));
  int64_t slots = 0;
  MSA_RETURN_IF_ERROR(checked_mul(c.num_blocks(), c.block_size(),
                                  kn + ": num_blocks * block_size (cache slots)", &slots));
  if (c.scale_mode != KvScaleMode::kNone && c.scale_mode != KvScaleMode::kPerLayer &&
      c.scale_mode != KvScaleMode::kPerTokenHead) {
    return invalid(n + ".scale_mode: " + std::to_string(static_cast<int>(c.scale_mode)) +
                   " is not a KvScaleMode (expected 0 none, 1 per layer or 2 per token-head)");
  }
  if (c.k.dtype != DType::kE4M3 && c.scale_mode != KvScaleMode::kNone) {
    return invalid(n + ".scale_mode: scales apply to e4m3 caches only; the cache is " +
                   dtype_name(c.k.dtype));
  }
  if (c.scale_mode == KvScaleMode::kNone) return Status::Ok();
  const std::string ks = n + ".k_scale", vs = n + ".v_scale";
  for (const auto* s : {&c.k_scale, &c.v_scale}) {
    const std::string& sn = (s == &c.k_scale) ? ks : vs;
    MSA_RETURN_IF_ERROR(require_defined(*s, sn.c_str()));
    MSA_RETURN_IF_ERROR(require_dtype(*s, sn.c_str(), {DType::kF32}));
    MSA_RETURN_IF_ERROR(require_device(*s, sn.c_str(), device));
    MSA_RETURN_IF_ERROR(require_valid_layout(*s, sn.c_str()));
    if (c.scale_mode == KvScaleMode::kPerLayer) {
      if (s->numel() != 1 || s->ndim > 1) {
        return invalid(sn + ": per-layer scale must have shape [] or [1], got " + shape_string(*s));
      }
    } else {
      MSA_RETURN_IF_ERROR(require_ndim(*s, sn.c_str(), 2));
      MSA_RETURN_IF_ERROR(require_dim(*s, sn.c_str(), 0, c.num_kv_heads(), "num_kv_heads"));
      MSA_RETURN_IF_ERROR(
          require_dim_at_least(*s, sn.c_str(), 1, slots, "num_blocks * block_size"));
    }
  }
  return Status::Ok();
}

Status check_workspace(const Workspace& ws, size_t needed) {
  if (needed == 0) return Status::Ok();
  if (ws.data == nullptr || ws.bytes < needed) {
    return Status(StatusCode::kWorkspaceTooSmall,
                  "workspace: " + std::to_string(ws.bytes) + " bytes given (data " +
                      (ws.data ? "set" : "null") + "), the op needs " + std::to_string(needed));
  }
  return Status::Ok();
}

Status check_workspace_aligned(const void* data, const char* reader) {
  if (reinterpret_cast<uintptr_t>(data) % 256 == 0) return Status::Ok();
  return Status(StatusCode::kInvalidArgument,
                std::string("workspace: data must be aligned to 256 bytes (") + reader + ")");
}

}  // namespace detail
}  // namespace msa
