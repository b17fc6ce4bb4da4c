// Host validation and dispatch of the RoPE table builder (spec A11).
#include <cmath>
#include <string>

#include "core/dispatch.h"
#include "core/validate.h"
#include "msa/fused_qknorm_rope.h"

namespace msa {

Status check(const RopeCacheArgs& args) {
  if (!(args.theta > 0.0) || !std::isfinite(args.theta)) {
    return detail::invalid("theta: " + std::to_string(args.theta) +
                           ", expected a finite value > 0");
  }
  MSA_RETURN_IF_ERROR(detail::require_ndim(args.cos_sin_out, "cos_sin_out", 2));
  MSA_RETURN_IF_ERROR(detail::require_dtype(args.cos_sin_out, "cos_sin_out", {DType::kF32}));
  const int64_t rotary_dim = args.cos_sin_out.shape[1];
  if (rotary_dim < 2 || rotary_dim % 2 != 0) {
    return detail::invalid("cos_sin_out: shape[1] is " + std::to_string(rotary_dim) +
                           ", expected an even rotary_dim >= 2");
  }
  return Status::Ok();
}

Status workspace_size(const RopeCacheArgs& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_workspace_size(args, args.cos_sin_out.device, bytes);
}

Status run(const RopeCacheArgs& args, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check(args));
  return detail::dispatch_run(args, args.cos_sin_out.device, workspace, stream);
}

}  // namespace msa
