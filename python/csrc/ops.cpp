// The msa PyTorch operator library, generated from one table: each op below lists its
// arguments once (name, kind, and how it fills the msa Args struct), and templates derive
//   - the schema of torch.ops.msa.<op>: an out variant returning nothing, each tensor it writes
//     with its own alias set ("!", the workspace included, as scratch); arguments in table
//     order with the workspace between the tensors and the scalars;
//   - its kernel (CPU and CUDA: msa dispatches on the tensors' device itself);
//   - torch.ops.msa.<op>_workspace_size(str device, <the same arguments less the workspace>)
//     -> int, the bytes msa::workspace_size asks for these shapes (meta tensors accepted).
// Kernels are boxed against torch's stable ABI (no libtorch C++ types cross the boundary).
// Errors leave as std::runtime_error("msa.<op>: <status code name>: <message>"); msa/_ops.py
// raises the matching Python exception.
#include <Python.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "glue.h"

namespace msa_torch {
namespace {

using torch::stable::detail::from;
using torch::stable::detail::to;

// ---- the table's vocabulary ----------------------------------------------------------------

// kTensor: one schema argument; kKvCache: three (the cache, then "Tensor? k_scale" and
// "Tensor? v_scale"); kInt / kFloat: one scalar, after the workspace.
enum class Kind { kTensor, kKvCache, kInt, kFloat };
enum Flags : unsigned { kRead = 0, kOptional = 1, kWritten = 2 };

// One decoded argument, as a field's setter sees it.
struct Value {
  const ViewFactory* view = nullptr;
  const char* name = nullptr;
  OptTensor tensor[3];  // kTensor: [0]; kKvCache: cache, k_scale, v_scale
  int64_t i = 0;
  double f = 0.0;
};

template <typename A>
struct Field {
  Kind kind;
  const char* name;
  unsigned flags;
  void (*set)(A& args, const Value& value);
};

template <typename A, msa::TensorView A::*M>
void set_view(A& a, const Value& v) {
  a.*M = (*v.view)(v.tensor[0], v.name);
}

template <typename A, msa::KvCacheView A::*M>
void set_kv_cache(A& a, const Value& v) {
  if (v.tensor[0].has_value() && v.tensor[0]->defined()) {
    a.*M = v.view->kv_cache(*v.tensor[0], v.tensor[1], v.tensor[2], v.name);
  }
}

template <typename A, int A::*M>
void set_int(A& a, const Value& v) {
  a.*M = static_cast<int>(v.i);
}

template <typename A, float A::*M>
void set_float(A& a, const Value& v) {
  a.*M = static_cast<float>(v.f);
}

template <typename A, double A::*M>
void set_double(A& a, const Value& v) {
  a.*M = v.f;
}

template <typename A, int msa::IndexTopkParams::*M>
void set_topk_param(A& a, const Value& v) {
  a.params.*M = static_cast<int>(v.i);
}

void set_mode(msa::FusedQkNormRopeArgs& a, const Value& v) {
  if (v.i < 0 || v.i > 2) {
    throw StatusError(msa::Status(msa::StatusCode::kInvalidArgument,
                                  "pre_attention_mode: " + std::to_string(v.i) +
                                      ", expected 0 (dense), 1 (sparse) or 2 (skip_index)"));
  }
  a.mode = static_cast<msa::PreAttentionMode>(v.i);
}

// Table entries; `A` is the Args struct of the op being described.
#define MSA_IN(m) \
  Field<A> { Kind::kTensor, #m, kRead, &set_view<A, &A::m> }
#define MSA_OUT(m) \
  Field<A> { Kind::kTensor, #m, kWritten, &set_view<A, &A::m> }
#define MSA_OPT_IN(m) \
  Field<A> { Kind::kTensor, #m, kOptional, &set_view<A, &A::m> }
#define MSA_OPT_OUT(m) \
  Field<A> { Kind::kTensor, #m, kOptional | kWritten, &set_view<A, &A::m> }
#define MSA_KV_IN(m) \
  Field<A> { Kind::kKvCache, #m, kRead, &set_kv_cache<A, &A::m> }
#define MSA_KV_OPT_OUT(m) \
  Field<A> { Kind::kKvCache, #m, kOptional | kWritten, &set_kv_cache<A, &A::m> }
#define MSA_INT(m) \
  Field<A> { Kind::kInt, #m, kRead, &set_int<A, &A::m> }
#define MSA_FLOAT(m) \
  Field<A> { Kind::kFloat, #m, kRead, &set_float<A, &A::m> }
#define MSA_TOPK_PARAMS                                                                        \
  Field<A>{Kind::kInt, "topk", kRead, &set_topk_param<A, &msa::IndexTopkParams::topk>},        \
      Field<A>{Kind::kInt, "init_blocks", kRead,                                               \
               &set_topk_param<A, &msa::IndexTopkParams::init_blocks>},                        \
      Field<A> {                                                                               \
    Kind::kInt, "local_blocks", kRead, &set_topk_param<A, &msa::IndexTopkParams::local_blocks> \
  }

// ---- the table -----------------------------------------------------------------------------
// Argument order is the schema's: keep it in step with the Python wrappers' keyword names
// (msa/_ops.py passes arguments by name, in the order torch.ops.msa reports).

struct FusedQkNormRope {
  using A = msa::FusedQkNormRopeArgs;
  static constexpr const char* kName = "fused_qknorm_rope";
  static constexpr Field<A> kFields[] = {
      MSA_OUT(qkv),
      MSA_IN(positions),
      MSA_IN(cos_sin_cache),
      MSA_IN(q_norm_weight),
      MSA_IN(k_norm_weight),
      MSA_OPT_IN(index_q_norm_weight),
      MSA_OPT_IN(index_k_norm_weight),
      MSA_OPT_IN(slot_mapping),
      MSA_KV_OPT_OUT(kv_cache),
      MSA_OPT_IN(index_slot_mapping),
      MSA_OPT_OUT(index_cache),
      MSA_OPT_OUT(q_out),
      MSA_OPT_OUT(index_q_out),
      MSA_OPT_OUT(error_flags),
      Field<A>{Kind::kInt, "pre_attention_mode", kRead, &set_mode},
      MSA_INT(num_q_heads),
      MSA_INT(num_kv_heads),
      MSA_INT(num_index_heads),
      MSA_INT(rotary_dim),
      MSA_FLOAT(eps),
  };
};

struct RopeCache {
  using A = msa::RopeCacheArgs;
  static constexpr const char* kName = "rope_cache";
  static constexpr Field<A> kFields[] = {
      MSA_OUT(cos_sin_out),
      Field<A>{Kind::kFloat, "theta", kRead, &set_double<A, &A::theta>},
  };
};

struct IndexTopkDecode {
  using A = msa::IndexTopkDecodeArgs;
  static constexpr const char* kName = "index_topk_decode";
  static constexpr Field<A> kFields[] = {
      MSA_IN(index_q),   MSA_IN(index_cache),      MSA_IN(block_table), MSA_IN(seq_lens),
      MSA_OUT(topk_out), MSA_OPT_OUT(error_flags), MSA_INT(query_len),  MSA_TOPK_PARAMS,
  };
};

struct IndexTopkPrefill {
  using A = msa::IndexTopkPrefillArgs;
  static constexpr const char* kName = "index_topk_prefill";
  static constexpr Field<A> kFields[] = {
      MSA_IN(index_q),  MSA_IN(index_cache), MSA_IN(block_table),      MSA_IN(cu_seqlens_q),
      MSA_IN(seq_lens), MSA_OUT(topk_out),   MSA_OPT_OUT(error_flags), MSA_TOPK_PARAMS,
  };
};

struct SparsePage16 {
  using A = msa::SparsePage16Args;
  static constexpr const char* kName = "sparse_page16";
  static constexpr Field<A> kFields[] = {
      MSA_IN(topk),       MSA_IN(block_table),       MSA_IN(seq_lens),
      MSA_OUT(table_out), MSA_OUT(context_lens_out), MSA_OPT_OUT(error_flags),
      MSA_INT(query_len), MSA_INT(page_stride),      MSA_INT(block_size),
  };
};

struct SparseAttentionDecode {
  using A = msa::SparseAttentionDecodeArgs;
  static constexpr const char* kName = "sparse_attention_decode";
  static constexpr Field<A> kFields[] = {
      MSA_IN(q),           MSA_KV_IN(kv_cache),
      MSA_IN(block_table), MSA_IN(seq_lens),
      MSA_IN(topk),        MSA_OUT(out),
      MSA_OPT_OUT(lse),    MSA_OPT_OUT(error_flags),
      MSA_INT(query_len),  MSA_FLOAT(softmax_scale),
  };
};

struct SparseAttentionPrefill {
  using A = msa::SparseAttentionPrefillArgs;
  static constexpr const char* kName = "sparse_attention_prefill";
  static constexpr Field<A> kFields[] = {
      MSA_IN(q),
      MSA_KV_IN(kv_cache),
      MSA_IN(block_table),
      MSA_IN(cu_seqlens_q),
      MSA_IN(seq_lens),
      MSA_IN(topk),
      MSA_OUT(out),
      MSA_OPT_OUT(lse),
      MSA_OPT_OUT(error_flags),
      MSA_FLOAT(softmax_scale),
  };
};

struct DenseAttention {
  using A = msa::DenseAttentionArgs;
  static constexpr const char* kName = "dense_attention";
  static constexpr Field<A> kFields[] = {
      MSA_IN(q),
      MSA_KV_IN(kv_cache),
      MSA_IN(block_table),
      MSA_IN(cu_seqlens_q),
      MSA_IN(seq_lens),
      MSA_OUT(out),
      MSA_OPT_OUT(lse),
      MSA_OPT_OUT(error_flags),
      MSA_FLOAT(softmax_scale),
  };
};

struct BatchMetadata {
  using A = msa::BatchMetadataArgs;
  static constexpr const char* kName = "batch_metadata";
  static constexpr Field<A> kFields[] = {
      MSA_IN(query_lens),
      MSA_IN(seq_lens),
      MSA_IN(block_table),
      MSA_OPT_IN(index_block_table),
      MSA_OPT_OUT(query_start_loc),
      MSA_OPT_OUT(prefill_cu_seqlens_q),
      MSA_OPT_OUT(prefill_cu_seqlens_k),
      MSA_OPT_OUT(context_lens),
      MSA_OPT_OUT(kv_block_counts),
      MSA_OPT_OUT(token_request),
      MSA_OPT_OUT(token_position),
      MSA_OPT_OUT(slot_mapping),
      MSA_OPT_OUT(index_slot_mapping),
      MSA_OPT_OUT(totals),
      MSA_OPT_OUT(error_flags),
      MSA_INT(num_decode_requests),
      MSA_INT(decode_query_len),
      MSA_INT(block_size),
  };
};

#undef MSA_IN
#undef MSA_OUT
#undef MSA_OPT_IN
#undef MSA_OPT_OUT
#undef MSA_KV_IN
#undef MSA_KV_OPT_OUT
#undef MSA_INT
#undef MSA_FLOAT
#undef MSA_TOPK_PARAMS

// ---- what the templates derive from an entry -----------------------------------------------

bool is_scalar(Kind k) { return k == Kind::kInt || k == Kind::kFloat; }

// Schema arguments a field takes.
int width(Kind k) { return k == Kind::kKvCache ? 3 : 1; }

template <typename Op>
int num_schema_args() {
  int n = 0;
  for (const auto& f : Op::kFields) n += width(f.kind);
  return n;
}

// "name(args) -> ()" for the op, or "name_workspace_size(str device, args) -> int".
template <typename Op>
std::string schema(bool size_form) {
  std::string tensors, scalars;
  char alias = 'a';
  auto append = [](std::string& list, const std::string& arg) {
    list += (list.empty() ? "" : ", ") + arg;
  };
  auto tensor = [&](const char* name, unsigned flags) {
    std::string type = "Tensor";
    if ((flags & kWritten) && !size_form) type += std::string("(") + alias++ + "!)";
    if (flags & kOptional) type += "?";
    return type + " " + name;
  };
  for (const auto& f : Op::kFields) {
    switch (f.kind) {
      case Kind::kTensor:
        append(tensors, tensor(f.name, f.flags));
        break;
      case Kind::kKvCache:
        append(tensors, tensor(f.name, f.flags));
        append(tensors, "Tensor? k_scale");
        append(tensors, "Tensor? v_scale");
        break;
      case Kind::kInt:
        append(scalars, std::string("int ") + f.name);
        break;
      case Kind::kFloat:
        append(scalars, std::string("float ") + f.name);
        break;
    }
  }
  if (size_form) {
    return std::string(Op::kName) + "_workspace_size(str device, " + tensors + ", " + scalars +
           ") -> int";
  }
  return std::string(Op::kName) + "(" + tensors + ", " + tensor("workspace", kWritten) + ", " +
         scalars + ") -> ()";
}

template <typename Op>
struct Kernels {
  using A = typename Op::A;

  // Reads the op's arguments from a boxed stack from index `pos` on (each entry converted
  // exactly once: conversion takes ownership of tensor handles). The run form's workspace sits
  // between the tensors and the scalars; `first_tensor` gets the first tensor argument.
  static A read(const ViewFactory& view, StableIValue* stack, uint64_t pos, OptTensor* workspace,
                OptTensor* first_tensor) {
    A args;
    for (const auto& f : Op::kFields) {
      if (is_scalar(f.kind)) continue;
      Value v;
      v.view = &view;
      v.name = f.name;
      // A required tensor is a handle; an optional one points to a handle or is null.
      v.tensor[0] =
          (f.flags & kOptional) ? to<OptTensor>(stack[pos++]) : OptTensor(to<Tensor>(stack[pos++]));
      for (int i = 1; i < width(f.kind); ++i) v.tensor[i] = to<OptTensor>(stack[pos++]);
      if (first_tensor != nullptr && !first_tensor->has_value()) *first_tensor = v.tensor[0];
      f.set(args, v);
    }
    if (workspace != nullptr) *workspace = to<Tensor>(stack[pos++]);
    for (const auto& f : Op::kFields) {
      if (!is_scalar(f.kind)) continue;
      Value v;
      v.view = &view;
      v.name = f.name;
      if (f.kind == Kind::kInt) {
        v.i = to<int64_t>(stack[pos++]);
      } else {
        v.f = to<double>(stack[pos++]);
      }
      f.set(args, v);
    }
    return args;
  }

  static void check_arity(uint64_t num_args, uint64_t want_args, uint64_t num_outputs,
                          uint64_t want_outputs) {
    if (num_args != want_args || num_outputs != want_outputs) {
      throw std::runtime_error(std::string("msa.") + Op::kName +
                               ": internal: schema and kernel disagree on the argument count");
    }
  }

  [[noreturn]] static void rethrow(const StatusError& e) {
    throw std::runtime_error(std::string("msa.") + Op::kName + ": " + e.what());
  }

  static void run(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    check_arity(num_args, num_schema_args<Op>() + 1, num_outputs, 0);
    try {
      OptTensor workspace, first;
      const A args = read(ViewFactory::real(), stack, 0, &workspace, &first);
      const msa::Device device = device_of(*first);
      std::optional<torch::stable::accelerator::DeviceGuard> guard;
      if (device.is_cuda()) guard.emplace(device.index);
      throw_if_error(msa::run(args, to_workspace(*workspace, device), current_stream(device)));
    } catch (const StatusError& e) {
      rethrow(e);
    }
  }

  static void workspace_size(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    check_arity(num_args, num_schema_args<Op>() + 1, num_outputs, 1);
    try {
      const std::string device = to<std::string>(stack[0]);
      const A args =
          read(ViewFactory::shape_only(parse_device(device)), stack, 1, nullptr, nullptr);
      size_t bytes = 0;
      throw_if_error(msa::workspace_size(args, &bytes));
      stack[0] = from(static_cast<int64_t>(bytes));
    } catch (const StatusError& e) {
      rethrow(e);
    }
  }
};

template <typename... Ops>
struct OpList {
  static void define(torch::stable::detail::StableLibrary& m) {
    (m.def(schema<Ops>(false).c_str()), ...);
    (m.def(schema<Ops>(true).c_str()), ...);
  }
  static void impl_kernels(torch::stable::detail::StableLibrary& m) {
    (m.impl(Ops::kName, &Kernels<Ops>::run), ...);
  }
  static void impl_workspace_sizes(torch::stable::detail::StableLibrary& m) {
    (m.impl((std::string(Ops::kName) + "_workspace_size").c_str(), &Kernels<Ops>::workspace_size),
     ...);
  }
};

using AllOps = OpList<FusedQkNormRope, RopeCache, IndexTopkDecode, IndexTopkPrefill, SparsePage16,
                      SparseAttentionDecode, SparseAttentionPrefill, DenseAttention, BatchMetadata>;

}  // namespace
}  // namespace msa_torch

STABLE_TORCH_LIBRARY(msa, m) { msa_torch::AllOps::define(m); }

// One kernel per op serves both devices: msa dispatches on the tensors' device itself.
STABLE_TORCH_LIBRARY_IMPL(msa, CPU, m) { msa_torch::AllOps::impl_kernels(m); }

STABLE_TORCH_LIBRARY_IMPL(msa, CUDA, m) { msa_torch::AllOps::impl_kernels(m); }

// Sizing reads only shapes, so it serves every backend, meta tensors included.
STABLE_TORCH_LIBRARY_IMPL(msa, CompositeExplicitAutograd, m) {
  msa_torch::AllOps::impl_workspace_sizes(m);
}

// The Python module msa._C (limited API, so one build serves every CPython >= 3.10): importing
// it registers the ops above; it carries the library's build facts as constants.
PyMODINIT_FUNC PyInit__C() {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C",
                               "msa PyTorch extension: registers torch.ops.msa.*", -1, nullptr};
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  if (PyModule_AddStringConstant(m, "VERSION", msa::version_string()) != 0 ||
      PyModule_AddIntConstant(m, "BUILT_WITH_CUDA", msa::built_with_cuda() ? 1 : 0) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
