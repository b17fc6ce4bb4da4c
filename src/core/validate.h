// Host-side argument validation shared by every op's check(). Each helper returns a Status whose
// message names the argument and the expected value; MSA_RETURN_IF_ERROR chains them.
#pragma once

#include <initializer_list>
#include <string>

#include "msa/cache.h"
#include "msa/tensor.h"
#include "msa/types.h"

#define MSA_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::msa::Status msa_status_ = (expr);        \
    if (!msa_status_.ok()) return msa_status_; \
  } while (0)

namespace msa {
namespace detail {

Status invalid(const std::string& msg);
Status out_of_range(const std::string& msg);
Status not_supported(const std::string& msg);

// "[2, 3, 4]"; "[invalid rank N]" when ndim is outside [0, kMaxDims].
std::string shape_string(const TensorView& t);

// Sizes derived from shapes (row counts, widths, slot counts, workspace bytes) are computed with
// these: *out = a * b (or a + b), or kInvalidArgument naming `what` when the exact result does
// not fit int64. `what` names the arguments the operands come from.
Status checked_mul(int64_t a, int64_t b, const std::string& what, int64_t* out);
Status checked_add(int64_t a, int64_t b, const std::string& what, int64_t* out);

// The tensor is given (data != nullptr).
Status require_defined(const TensorView& t, const char* name);
// Rank equals ndim.
Status require_ndim(const TensorView& t, const char* name, int ndim);
// Dimension d equals `expected`; `what` explains the value ("num_q_heads", "T", ...).
Status require_dim(const TensorView& t, const char* name, int d, int64_t expected,
                   const char* what);
// Dimension d is at least `minimum`.
Status require_dim_at_least(const TensorView& t, const char* name, int d, int64_t minimum,
                            const char* what);
Status require_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed);
Status require_device(const TensorView& t, const char* name, const Device& device);
// Innermost stride is 1.
Status require_unit_last_stride(const TensorView& t, const char* name);
// The device is the CPU or a CUDA ordinal >= 0, the rank is in [0, kMaxDims], strides and
// shape are non-negative, and the byte offset one
// past the last element fits int64, so every element offset a backend computes from indices
// within the shape fits int64 too.
Status require_valid_layout(const TensorView& t, const char* name);
// Rank-1 [1] i32 error-flag tensor on `device`, when given.
Status check_error_flags(const TensorView& t, const Device& device);
// Full structural check of a KV cache view (k and v identical shape/dtype/device, last stride
// 1, scale tensors per mode).
Status check_kv_cache(const KvCacheView& c, const char* name, const Device& device);
// Workspace at least `needed` bytes (and non-null when needed > 0).
Status check_workspace(const Workspace& ws, size_t needed);
// Workspace data aligned to 256 bytes as Workspace documents, for a kernel path that needs it
// (`reader` says which, for the message).
Status check_workspace_aligned(const void* data, const char* reader);

// Rounds a byte count up to the 256-byte alignment workspace sub-buffers keep.
constexpr size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace detail
}  // namespace msa
