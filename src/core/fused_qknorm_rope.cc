// Host validation and dispatch of the fused pre-attention op (spec A11, B5).
#include "msa/fused_qknorm_rope.h"

#include <cmath>
#include <string>

#include "core/dispatch.h"
#include "core/validate.h"

namespace msa {

namespace {

using detail::invalid;
using detail::require_defined;
using detail::require_device;
using detail::require_dim;
using detail::require_dtype;
using detail::require_ndim;
using detail::require_unit_last_stride;

const char* mode_name(PreAttentionMode m) {
  switch (m) {
    case PreAttentionMode::kDense:
      return "dense";
    case PreAttentionMode::kSparse:
      return "sparse";
    case PreAttentionMode::kSkipIndex:
      return "skip-index";
  }
  return "unknown";
}

// A [T] i32 / i64 vector on `device`.
Status check_row_vector(const TensorView& t, const char* name, int64_t tokens,
                        const Device& device) {
  MSA_RETURN_IF_ERROR(require_ndim(t, name, 1));
  MSA_RETURN_IF_ERROR(require_dim(t, name, 0, tokens, "the token count T = qkv.shape[0]"));
  MSA_RETURN_IF_ERROR(require_dtype(t, name, {DType::kI32, DType::kI64}));
  return require_device(t, name, device);
}

// A [dim] norm weight in the qkv dtype or f32.
Status check_weight(const TensorView& t, const char* name, int64_t dim, const char* what,
                    DType qkv_dtype, const Device& device) {
  MSA_RETURN_IF_ERROR(require_ndim(t, name, 1));
  MSA_RETURN_IF_ERROR(require_dim(t, name, 0, dim, what));
  MSA_RETURN_IF_ERROR(require_dtype(t, name, {qkv_dtype, DType::kF32}));
  return require_device(t, name, device);
}

// An optional per-head output: [T, heads, dim] or [T, heads * dim], last stride 1.
Status check_head_output(const TensorView& t, const char* name, int64_t tokens, int64_t heads,
                         int64_t dim, const char* heads_what, const Device& device) {
  MSA_RETURN_IF_ERROR(require_defined(t, name));
  if (t.ndim == 3) {
    MSA_RETURN_IF_ERROR(require_ndim(t, name, 3));
    MSA_RETURN_IF_ERROR(require_dim(t, name, 0, tokens, "the token count T"));
    MSA_RETURN_IF_ERROR(require_dim(t, name, 1, heads, heads_what));
    MSA_RETURN_IF_ERROR(require_dim(t, name, 2, dim, "the head dim"));
  } else {
    MSA_RETURN_IF_ERROR(require_ndim(t, name, 2));
    MSA_RETURN_IF_ERROR(require_dim(t, name, 0, tokens, "the token count T"));
    int64_t width = 0;
    MSA_RETURN_IF_ERROR(
        detail::checked_mul(heads, dim, std::string(name) + ": heads * head dim", &width));
    MSA_RETURN_IF_ERROR(require_dim(t, name, 1, width, "heads * head dim"));
  }
  MSA_RETURN_IF_ERROR(require_unit_last_stride(t, name));
  return require_device(t, name, device);
}

}  // namespace

Status check(const FusedQkNormRopeArgs& args) {
  const PreAttentionMode mode = args.mode;
  if (mode != PreAttentionMode::kDense && mode != PreAttentionMode::kSparse &&
      mode != PreAttentionMode::kSkipIndex) {
    return invalid("mode: " + std::to_string(static_cast<int>(mode)) +
                   " is not a PreAttentionMode (expected 0 dense, 1 sparse or 2 skip-index)");
  }
  const bool sparse = mode == PreAttentionMode::kSparse;
  const std::string in_mode = std::string(" in ") + mode_name(mode) + " mode";

  MSA_RETURN_IF_ERROR(require_ndim(args.qkv, "qkv", 2));
  MSA_RETURN_IF_ERROR(require_dtype(args.qkv, "qkv", {DType::kBF16, DType::kF16}));
  MSA_RETURN_IF_ERROR(require_unit_last_stride(args.qkv, "qkv"));
  const Device device = args.qkv.device;
  const DType act = args.qkv.dtype;
  const int64_t tokens = args.qkv.shape[0];

  if (args.num_q_heads < 1) {
    return invalid("num_q_heads: " + std::to_string(args.num_q_heads) + ", expected >= 1");
  }
  if (args.num_kv_heads < 1) {
    return invalid("num_kv_heads: " + std::to_string(args.num_kv_heads) + ", expected >= 1");
  }
  if (args.num_index_heads < 0) {
    return invalid("num_index_heads: " + std::to_string(args.num_index_heads) + ", expected >= 0");
  }
  if (mode != PreAttentionMode::kDense && args.num_index_heads < 1) {
    return invalid("num_index_heads: " + std::to_string(args.num_index_heads) + in_mode +
                   ", expected >= 1 (the row carries index_q heads)");
  }
  if (!(args.eps > 0.0f) || !std::isfinite(args.eps)) {
    return invalid("eps: " + std::to_string(args.eps) + ", expected a finite value > 0");
  }

  MSA_RETURN_IF_ERROR(require_ndim(args.q_norm_weight, "q_norm_weight", 1));
  const int64_t head_dim = args.q_norm_weight.shape[0];
  if (head_dim < 1) return invalid("q_norm_weight: empty, expected [head_dim] with head_dim >= 1");
  MSA_RETURN_IF_ERROR(
      check_weight(args.q_norm_weight, "q_norm_weight", head_dim, "head_dim", act, device));
  MSA_RETURN_IF_ERROR(
      check_weight(args.k_norm_weight, "k_norm_weight", head_dim, "head_dim", act, device));

  // The index head dim comes from the index weights; without them (dense or skip-index) the
  // index segments have the main head dim.
  int64_t index_dim = head_dim;
  if (sparse) {
    MSA_RETURN_IF_ERROR(require_defined(args.index_q_norm_weight, "index_q_norm_weight"));
    MSA_RETURN_IF_ERROR(require_defined(args.index_k_norm_weight, "index_k_norm_weight"));
  }
  if (args.index_q_norm_weight.defined()) {
    MSA_RETURN_IF_ERROR(require_ndim(args.index_q_norm_weight, "index_q_norm_weight", 1));
    index_dim = args.index_q_norm_weight.shape[0];
    if (index_dim < 1) return invalid("index_q_norm_weight: empty, expected [index_dim] >= 1");
    MSA_RETURN_IF_ERROR(check_weight(args.index_q_norm_weight, "index_q_norm_weight", index_dim,
                                     "index_dim", act, device));
  }
  if (args.index_k_norm_weight.defined()) {
    MSA_RETURN_IF_ERROR(check_weight(args.index_k_norm_weight, "index_k_norm_weight", index_dim,
                                     "index_dim (index_q_norm_weight.shape[0])", act, device));
  }

  int64_t base_width = 0, index_width = 0, full_width = 0;
  MSA_RETURN_IF_ERROR(detail::checked_mul(args.num_q_heads + 2LL * args.num_kv_heads, head_dim,
                                          "q_norm_weight: (num_q_heads + 2 num_kv_heads) * "
                                          "head_dim",
                                          &base_width));
  MSA_RETURN_IF_ERROR(detail::checked_mul(args.num_index_heads + 1LL, index_dim,
                                          "index_q_norm_weight: (num_index_heads + 1) * index_dim",
                                          &index_width));
  MSA_RETURN_IF_ERROR(
      detail::checked_add(base_width, index_width, "qkv: the sparse row width", &full_width));
  const int64_t width = args.qkv.shape[1];
  if (mode == PreAttentionMode::kDense) {
    const bool full_ok = args.num_index_heads >= 1 && width == full_width;
    if (width != base_width && !full_ok) {
      std::string expected =
          std::to_string(base_width) + " = (num_q_heads + 2 num_kv_heads) * " + "head_dim";
      if (args.num_index_heads >= 1) {
        expected += " or the sparse row width " + std::to_string(full_width);
      }
      return invalid("qkv: shape[1] is " + std::to_string(width) + in_mode + ", expected " +
                     expected);
    }
  } else if (width != full_width) {
    return invalid("qkv: shape[1] is " + std::to_string(width) + in_mode + ", expected " +
                   std::to_string(full_width) +
                   " = (num_q_heads + 2 num_kv_heads) * head_dim + (num_index_heads + 1) * "
                   "index_dim");
  }

  if (args.rotary_dim < 2 || args.rotary_dim % 2 != 0 || args.rotary_dim > head_dim) {
    return invalid("rotary_dim: " + std::to_string(args.rotary_dim) +
                   ", expected an even value in [2, head_dim = " + std::to_string(head_dim) + "]");
  }
  if (sparse && args.rotary_dim > index_dim) {
    return invalid("rotary_dim: " + std::to_string(args.rotary_dim) +
                   " exceeds index_dim = " + std::to_string(index_dim));
  }

  MSA_RETURN_IF_ERROR(check_row_vector(args.positions, "positions", tokens, device));
  MSA_RETURN_IF_ERROR(require_ndim(args.cos_sin_cache, "cos_sin_cache", 2));
  MSA_RETURN_IF_ERROR(
      require_dim(args.cos_sin_cache, "cos_sin_cache", 1, args.rotary_dim, "rotary_dim"));
  MSA_RETURN_IF_ERROR(
      require_dtype(args.cos_sin_cache, "cos_sin_cache", {DType::kF32, DType::kBF16, DType::kF16}));
  MSA_RETURN_IF_ERROR(require_device(args.cos_sin_cache, "cos_sin_cache", device));

  if (args.slot_mapping.defined() != args.kv_cache.defined()) {
    return invalid(args.slot_mapping.defined()
                       ? "kv_cache: missing while slot_mapping is given (both or neither)"
                       : "slot_mapping: missing while kv_cache is given (both or neither)");
  }
  if (args.kv_cache.defined()) {
    MSA_RETURN_IF_ERROR(check_row_vector(args.slot_mapping, "slot_mapping", tokens, device));
    MSA_RETURN_IF_ERROR(detail::check_kv_cache(args.kv_cache, "kv_cache", device));
    MSA_RETURN_IF_ERROR(
        require_dim(args.kv_cache.k, "kv_cache.k", 1, args.num_kv_heads, "num_kv_heads"));
    MSA_RETURN_IF_ERROR(require_dim(args.kv_cache.k, "kv_cache.k", 3, head_dim, "head_dim"));
  }

  // index_q_out exists only in sparse mode; elsewhere it would be silently ignored. A
  // skip-index layer's engine passes the layer's index cache (and its slots) through: spec A11
  // only requires that it is not written, so it is accepted, checked and left untouched. Dense
  // layers have no index cache.
  if (!sparse && args.index_q_out.defined()) {
    return invalid("index_q_out: given" + in_mode + ", where the index branch is off");
  }
  if (mode == PreAttentionMode::kDense) {
    if (args.index_cache.defined()) {
      return invalid("index_cache: given" + in_mode + ", where the index branch is off");
    }
    if (args.index_slot_mapping.defined()) {
      return invalid("index_slot_mapping: given" + in_mode + ", where the index branch is off");
    }
  }
  if (args.index_slot_mapping.defined() && !args.index_cache.defined()) {
    return invalid("index_slot_mapping: given without index_cache");
  }
  if (args.index_cache.defined()) {
    MSA_RETURN_IF_ERROR(require_ndim(args.index_cache, "index_cache", 3));
    MSA_RETURN_IF_ERROR(require_dim(args.index_cache, "index_cache", 2, index_dim, "index_dim"));
    MSA_RETURN_IF_ERROR(
        require_dtype(args.index_cache, "index_cache", {DType::kBF16, DType::kE4M3}));
    MSA_RETURN_IF_ERROR(require_unit_last_stride(args.index_cache, "index_cache"));
    MSA_RETURN_IF_ERROR(require_device(args.index_cache, "index_cache", device));
    int64_t slots = 0;
    MSA_RETURN_IF_ERROR(detail::checked_mul(args.index_cache.shape[0], args.index_cache.shape[1],
                                            "index_cache: num_blocks * block_size", &slots));
    if (args.index_slot_mapping.defined()) {
      MSA_RETURN_IF_ERROR(
          check_row_vector(args.index_slot_mapping, "index_slot_mapping", tokens, device));
    } else if (sparse && !args.slot_mapping.defined()) {
      return invalid(
          "index_slot_mapping: missing, and no slot_mapping to fall back on, while "
          "index_cache is given");
    }
  }

  if (args.q_out.defined()) {
    MSA_RETURN_IF_ERROR(check_head_output(args.q_out, "q_out", tokens, args.num_q_heads, head_dim,
                                          "num_q_heads", device));
    MSA_RETURN_IF_ERROR(require_dtype(args.q_out, "q_out", {act}));
  }
  if (args.index_q_out.defined()) {
    MSA_RETURN_IF_ERROR(check_head_output(args.index_q_out, "index_q_out", tokens,
                                          args.num_index_heads, index_dim, "num_index_heads",
                                          device));
    MSA_RETURN_IF_ERROR(
        require_dtype(args.index_q_out, "index_q_out", {DType::kBF16, DType::kE4M3}));
  }
  return detail::check_error_flags(args.error_flags, device);
}

Status workspace_size(const FusedQkNormRopeArgs& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_workspace_size(args, args.qkv.device, bytes);
}

Status run(const FusedQkNormRopeArgs& args, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_run(args, args.qkv.device, workspace, stream);
}

}  // namespace msa
