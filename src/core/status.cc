#include "msa/types.h"

namespace msa {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kF32:
      return "f32";
    case DType::kE4M3:
      return "e4m3";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
  }
  return "unknown";
}

const char* status_code_name(StatusCode c) {
  switch (c) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kOutOfRange:
      return "out_of_range";
    case StatusCode::kNotSupported:
      return "not_supported";
    case StatusCode::kWorkspaceTooSmall:
      return "workspace_too_small";
    case StatusCode::kCudaError:
      return "cuda_error";
    case StatusCode::kIoError:
      return "io_error";
    case StatusCode::kParseError:
      return "parse_error";
    case StatusCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace msa
