#include "engine/runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>

#include "core/thread_pool.h"
#include "engine/synth.h"
#include "msa/attention.h"
#include "msa/cache.h"
#include "msa/dtype.h"
#include "msa/fused_qknorm_rope.h"
#include "msa/indexer.h"
#include "msa/metadata.h"
#include "msa/tensor.h"

#if MSA_ENGINE_CUDA
#include "engine/synth_cuda.h"
#endif

#define ENGINE_RETURN_IF_ERROR(expr)       \
  do {                                     \
    ::msa::Status engine_s_ = (expr);      \
    if (!engine_s_.ok()) return engine_s_; \
  } while (0)

namespace msa {
namespace engine {

float kv_scale_for_layer(int layer) {
  // Normed keys are O(1) with rare outliers near 6; values are uniform in +-1.04. A scale of
  // about 1/32 keeps both well inside e4m3's +-448 while leaving resolution for small values.
  return (1.0f + 0.25f * static_cast<float>(layer % 4)) / 32.0f;
}

namespace {

struct LayerBuffers {
  LayerKind kind = LayerKind::kDense;
  TensorView kv_storage;        // packed [num_blocks, Hkv, block_size, 2 * head_dim]
  TensorView k_scale, v_scale;  // fp8 caches: per-layer scales
  KvCacheView kv;               // views of kv_storage
  TensorView index_cache;       // compute layers only
};

// One buffer the runner allocates: its dtype, shape and the view that receives it (nullptr when
// only sizing).
struct BufferSpec {
  DType dtype;
  std::vector<int64_t> shape;
  TensorView* view;
};

// Bytes DeviceMemory::alloc takes for a buffer (rounded up to 256, at least 256), or
// kInvalidArgument when the size does not fit int64.
Status buffer_bytes(const BufferSpec& b, int64_t* bytes) {
  int64_t n = dtype_size(b.dtype);
  for (int64_t s : b.shape) {
    if (s < 0 || __builtin_mul_overflow(n, s, &n)) {
      return Status(StatusCode::kInvalidArgument,
                    "a runner buffer's size does not fit int64 bytes (model or workload too "
                    "large)");
    }
  }
  if (n > INT64_MAX - 255) {
    return Status(StatusCode::kInvalidArgument,
                  "a runner buffer's size does not fit int64 bytes (model or workload too large)");
  }
  *bytes = n == 0 ? 256 : (n + 255) / 256 * 256;
  return Status::Ok();
}

// A contiguous view of `data` with a shape of any length up to kMaxDims.
TensorView contiguous_view(void* data, DType dtype, const std::vector<int64_t>& shape,
                           Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[static_cast<size_t>(d)];
    t.strides[d] = stride;
    stride *= shape[static_cast<size_t>(d)];
  }
  return t;
}

float element_to_float(const void* base, int64_t i, DType t) {
  switch (t) {
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kE4M3:
      return e4m3_to_float(static_cast<const uint8_t*>(base)[i]);
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    default:
      return 0.0f;
  }
}

}  // namespace

struct ModelRunner::Impl {
  RunnerOptions o;
  DeviceMemory mem;
  StageClock clock;
  std::vector<LayerBuffers> layers;
  synth::RowShape row;
  int width = 0;
  int dir_dim = 0;  // max(head_dim, index_dim): length of the per-token direction vectors

  TensorView rope, q_norm, k_norm, iq_norm, ik_norm;
  // Per-step metadata inputs and outputs.
  TensorView query_lens, seq_lens, block_table, index_block_table;
  TensorView query_start_loc, prefill_cu, token_position, slot_mapping, index_slot_mapping;
  TensorView totals;
  // Activations.
  TensorView qkv, q_out, iq_out, topk, out;
  // CUDA synthesis / digest inputs and outputs.
  TensorView token_ids, token_pos64, digests_dev;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  // Host state of the current step.
  std::vector<int32_t> h_query_lens, h_seq_lens, h_block_table, h_index_block_table;
  std::vector<int32_t> tok_req;  // batch request index per row
  std::vector<int64_t> tok_pos;  // position per row
  std::vector<int64_t> tok_id;   // request id per row
  std::vector<float> dirs;       // [T, 2, dir_dim]: query and key directions
  std::vector<uint64_t> digests;

  explicit Impl(const RunnerOptions& opts) : o(opts), mem(opts.device), clock(opts.device) {}

  Stream stream() const { return Stream{nullptr, o.threads}; }

  // Every buffer init() allocates, in one list, so that the total can be checked before anything
  // is allocated (ModelRunner::plan_bytes). With `dst` null the views are not recorded.
  static std::vector<BufferSpec> buffers(const RunnerOptions& o, const std::vector<LayerKind>& plan,
                                         Impl* dst);

  Status make(const BufferSpec& b) {
    int64_t bytes = 0;
    ENGINE_RETURN_IF_ERROR(buffer_bytes(b, &bytes));
    Status st;
    void* p = mem.alloc(static_cast<size_t>(bytes), &st);
    if (!st.ok()) return st;
    *b.view = contiguous_view(p, b.dtype, b.shape, o.device);
    return Status::Ok();
  }

  Status ensure_workspace(size_t bytes) {
    if (bytes <= workspace_bytes) return Status::Ok();
    Status st;
    // Grows geometrically so that a slowly growing batch does not allocate every step.
    const size_t want = std::max(bytes, workspace_bytes * 2);
    void* p = mem.alloc(want, &st);
    if (!st.ok()) return st;
    workspace = p;
    workspace_bytes = want;
    return Status::Ok();
  }

  // Ops whose Args have batch_invariant (attention and index), counted by run_op.
  template <typename Args, typename = void>
  struct HasBatchInvariant : std::false_type {};
  template <typename Args>
  struct HasBatchInvariant<Args, std::void_t<decltype(Args::batch_invariant)>> : std::true_type {};
  TopkUnion topk_union;  // this step's, with o.topk_union
  int invariant_op_calls = 0;
  int variant_op_calls = 0;

  template <typename Args>
  Status run_op(const Args& args, int stage, const char* what) {
    if constexpr (HasBatchInvariant<Args>::value) {
      ++(args.batch_invariant ? invariant_op_calls : variant_op_calls);
    }
    size_t bytes = 0;
    Status s = msa::workspace_size(args, &bytes);
    if (s.ok()) s = ensure_workspace(bytes);
    if (!s.ok()) return Status(s.code(), std::string(what) + ": " + s.message());
    clock.start(stage);
    s = msa::run(args, Workspace{workspace, workspace_bytes}, stream());
    clock.stop(stage);
    if (!s.ok()) return Status(s.code(), std::string(what) + ": " + s.message());
    return Status::Ok();
  }

  Status init();
  Status prepare_step(const Batch& b, int64_t* num_tokens);
  Status synthesize(int layer, int64_t T);
  Status run_layer(int layer, const Batch& b, int64_t T, std::vector<FidelitySample>* samples);
  Status digest_layer(int layer, int64_t T);
  Status sample_fidelity(int layer, const Batch& b, int64_t row, FidelitySample* out);
  Status count_topk_union(const Batch& b, int64_t ndt, int64_t npt);
};

std::vector<BufferSpec> ModelRunner::Impl::buffers(const RunnerOptions& o,
                                                   const std::vector<LayerKind>& plan, Impl* dst) {
  const ModelConfig& m = o.model;
  const RankShape& sh = o.shape;
  const int64_t nb = o.num_blocks;
  const int64_t bs = m.sparse_block_size;
  const int64_t T = o.max_batch_tokens;
  const int64_t B = o.max_requests;
  const int64_t mb = o.max_blocks_per_request;
  const int64_t width = (static_cast<int64_t>(sh.num_q_heads) + 2 * sh.num_kv_heads) * sh.head_dim +
                        (static_cast<int64_t>(sh.num_index_heads) + 1) * sh.index_dim;
  std::vector<BufferSpec> v;
  auto add = [&](DType t, std::vector<int64_t> shape, TensorView* view) {
    v.push_back({t, std::move(shape), dst != nullptr ? view : nullptr});
  };
  for (size_t l = 0; l < plan.size(); ++l) {
    LayerBuffers* lb = dst != nullptr ? &dst->layers[l] : nullptr;
    add(o.kv_dtype, {nb, sh.num_kv_heads, bs, 2 * int64_t{sh.head_dim}},
        lb ? &lb->kv_storage : nullptr);
    if (o.kv_dtype == DType::kE4M3) {
      add(DType::kF32, {1}, lb ? &lb->k_scale : nullptr);
      add(DType::kF32, {1}, lb ? &lb->v_scale : nullptr);
    }
    // Only layers that recompute the top-k read or write an index cache (spec B10, item 9).
    if (plan[l] == LayerKind::kSparseCompute && !o.dense_everywhere) {
      add(o.index_dtype, {nb, bs, sh.index_dim}, lb ? &lb->index_cache : nullptr);
    }
  }
  add(DType::kF32, {o.max_position, m.rotary_dim}, dst ? &dst->rope : nullptr);
  add(DType::kF32, {sh.head_dim}, dst ? &dst->q_norm : nullptr);
  add(DType::kF32, {sh.head_dim}, dst ? &dst->k_norm : nullptr);
  add(DType::kF32, {sh.index_dim}, dst ? &dst->iq_norm : nullptr);
  add(DType::kF32, {sh.index_dim}, dst ? &dst->ik_norm : nullptr);

  add(DType::kI32, {B}, dst ? &dst->query_lens : nullptr);
  add(DType::kI32, {B}, dst ? &dst->seq_lens : nullptr);
  add(DType::kI32, {B, mb}, dst ? &dst->block_table : nullptr);
  add(DType::kI32, {B, mb}, dst ? &dst->index_block_table : nullptr);
  add(DType::kI32, {B + 1}, dst ? &dst->query_start_loc : nullptr);
  add(DType::kI32, {B + 1}, dst ? &dst->prefill_cu : nullptr);
  add(DType::kI32, {T}, dst ? &dst->token_position : nullptr);
  add(DType::kI64, {T}, dst ? &dst->slot_mapping : nullptr);
  add(DType::kI64, {T}, dst ? &dst->index_slot_mapping : nullptr);
  add(DType::kI32, {4}, dst ? &dst->totals : nullptr);

  add(DType::kBF16, {T, width}, dst ? &dst->qkv : nullptr);
  add(DType::kBF16, {T, sh.num_q_heads, sh.head_dim}, dst ? &dst->q_out : nullptr);
  add(o.index_dtype, {T, sh.num_index_heads, sh.index_dim}, dst ? &dst->iq_out : nullptr);
  add(DType::kI32, {sh.num_index_heads, T, m.sparse_topk_blocks}, dst ? &dst->topk : nullptr);
  add(DType::kF32, {T, sh.num_q_heads, sh.head_dim}, dst ? &dst->out : nullptr);
  if (o.device.is_cuda()) {
    add(DType::kI64, {T}, dst ? &dst->token_ids : nullptr);
    add(DType::kI64, {T}, dst ? &dst->token_pos64 : nullptr);
    add(DType::kI64, {T}, dst ? &dst->digests_dev : nullptr);
  }
  return v;
}

Status ModelRunner::Impl::init() {
  const ModelConfig& m = o.model;
  const RankShape& sh = o.shape;
  row.num_q_heads = sh.num_q_heads;
  row.num_kv_heads = sh.num_kv_heads;
  row.num_index_heads = sh.num_index_heads;
  row.head_dim = sh.head_dim;
  row.index_dim = sh.index_dim;
  row.block_size = m.sparse_block_size;
  width = row.width();
  dir_dim = std::max(sh.head_dim, sh.index_dim);

  std::vector<LayerKind> plan;
  ENGINE_RETURN_IF_ERROR(plan_topk_reuse(m, &plan));
  layers.resize(plan.size());
  for (size_t l = 0; l < plan.size(); ++l) layers[l].kind = plan[l];
  for (const BufferSpec& b : buffers(o, plan, this)) ENGINE_RETURN_IF_ERROR(make(b));

  for (size_t l = 0; l < layers.size(); ++l) {
    LayerBuffers& lb = layers[l];
    ENGINE_RETURN_IF_ERROR(make_packed_kv_cache(lb.kv_storage, &lb.kv));
    if (o.kv_dtype == DType::kE4M3) {
      const float scale = kv_scale_for_layer(static_cast<int>(l));
      ENGINE_RETURN_IF_ERROR(mem.upload(lb.k_scale.data, &scale, sizeof(float)));
      ENGINE_RETURN_IF_ERROR(mem.upload(lb.v_scale.data, &scale, sizeof(float)));
      ENGINE_RETURN_IF_ERROR(set_kv_scales(&lb.kv, KvScaleMode::kPerLayer, lb.k_scale, lb.v_scale));
    }
  }

  RopeCacheArgs ra;
  ra.theta = m.rope_theta;
  ra.cos_sin_out = rope;
  ENGINE_RETURN_IF_ERROR(run_op(ra, kStageActivations, "rope table"));

  // Norm weights: small deterministic perturbations of the identity (Gemma's 1 + w).
  TensorView* norms[4] = {&q_norm, &k_norm, &iq_norm, &ik_norm};
  const int dims[4] = {sh.head_dim, sh.head_dim, sh.index_dim, sh.index_dim};
  for (int w = 0; w < 4; ++w) {
    std::vector<float> v(static_cast<size_t>(dims[w]));
    for (int i = 0; i < dims[w]; ++i) {
      v[static_cast<size_t>(i)] =
          0.1f * synth::unit_noise(synth::hash(o.seed, synth::kTagWeight, static_cast<uint64_t>(w),
                                               static_cast<uint64_t>(i)));
    }
    ENGINE_RETURN_IF_ERROR(mem.upload(norms[w]->data, v.data(), v.size() * sizeof(float)));
  }
  return mem.synchronize();
}

Status ModelRunner::Impl::prepare_step(const Batch& b, int64_t* num_tokens) {
  const int nreq = static_cast<int>(b.requests.size());
  const int64_t mb = o.max_blocks_per_request;
  if (nreq > o.max_requests) return Status(StatusCode::kInternal, "batch exceeds max_requests");
  h_query_lens.assign(static_cast<size_t>(nreq), 0);
  h_seq_lens.assign(static_cast<size_t>(nreq), 0);
  h_block_table.assign(static_cast<size_t>(nreq * mb), 0);
  h_index_block_table.assign(static_cast<size_t>(nreq * mb), 0);
  tok_req.clear();
  tok_pos.clear();
  tok_id.clear();
  for (int i = 0; i < nreq; ++i) {
    const BatchRequest& r = b.requests[static_cast<size_t>(i)];
    h_query_lens[static_cast<size_t>(i)] = static_cast<int32_t>(r.num_rows);
    h_seq_lens[static_cast<size_t>(i)] = static_cast<int32_t>(r.start + r.num_rows);
    const size_t n = std::min(r.kv_table->size(), static_cast<size_t>(mb));
    std::copy_n(r.kv_table->begin(), n, h_block_table.begin() + i * mb);
    std::copy_n(r.index_table->begin(), n, h_index_block_table.begin() + i * mb);
    for (int64_t k = 0; k < r.num_rows; ++k) {
      tok_req.push_back(i);
      tok_pos.push_back(r.start + k);
      tok_id.push_back(r.id);
    }
  }
  const int64_t T = static_cast<int64_t>(tok_pos.size());
  if (T > o.max_batch_tokens) return Status(StatusCode::kInternal, "batch exceeds token budget");
  *num_tokens = T;

  clock.start(kStageMetadata);
  ENGINE_RETURN_IF_ERROR(mem.upload(query_lens.data, h_query_lens.data(), nreq * 4u));
  ENGINE_RETURN_IF_ERROR(mem.upload(seq_lens.data, h_seq_lens.data(), nreq * 4u));
  ENGINE_RETURN_IF_ERROR(
      mem.upload(block_table.data, h_block_table.data(), h_block_table.size() * 4));
  ENGINE_RETURN_IF_ERROR(mem.upload(index_block_table.data, h_index_block_table.data(),
                                    h_index_block_table.size() * 4));
  clock.stop(kStageMetadata);

  BatchMetadataArgs ma;
  ma.num_decode_requests = b.num_decodes;
  ma.decode_query_len = b.decode_query_len;
  ma.block_size = o.model.sparse_block_size;
  ma.query_lens = query_lens.slice(0, 0, nreq);
  ma.seq_lens = seq_lens.slice(0, 0, nreq);
  ma.block_table = block_table.slice(0, 0, nreq);
  ma.index_block_table = index_block_table.slice(0, 0, nreq);
  ma.query_start_loc = query_start_loc.slice(0, 0, nreq + 1);
  ma.prefill_cu_seqlens_q = prefill_cu.slice(0, 0, nreq - b.num_decodes + 1);
  ma.token_position = token_position;
  ma.slot_mapping = slot_mapping;
  ma.index_slot_mapping = index_slot_mapping;
  ma.totals = totals;
  ENGINE_RETURN_IF_ERROR(run_op(ma, kStageMetadata, "batch metadata"));

  // Per-token directions, shared by every layer of the step (the CUDA kernel derives its own).
  clock.start(kStageActivations);
  if (!o.device.is_cuda()) dirs.resize(static_cast<size_t>(T * 2 * dir_dim));
  const int bs = o.model.sparse_block_size;
  Status st = detail::parallel_for(
      o.device.is_cuda() ? 0 : T, stream(), [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) {
          float* qd = dirs.data() + t * 2 * dir_dim;
          float* kd = qd + dir_dim;
          const auto id = static_cast<uint64_t>(tok_id[static_cast<size_t>(t)]);
          const int64_t p = tok_pos[static_cast<size_t>(t)];
          int64_t focus[synth::kFocusBlocks];
          for (int i = 0; i < synth::kFocusBlocks; ++i) {
            focus[i] = synth::focus_block(o.seed, id, p, i, bs);
          }
          for (int d = 0; d < dir_dim; ++d) {
            qd[d] = synth::query_direction(o.seed, id, focus, d);
            kd[d] = synth::topic(o.seed, id, p / bs, d);
          }
        }
      });
  ENGINE_RETURN_IF_ERROR(st);
  if (o.device.is_cuda()) {
    std::vector<int64_t> ids(tok_id.begin(), tok_id.end());
    ENGINE_RETURN_IF_ERROR(mem.upload(token_ids.data, ids.data(), ids.size() * 8));
    ENGINE_RETURN_IF_ERROR(mem.upload(token_pos64.data, tok_pos.data(), tok_pos.size() * 8));
  }
  clock.stop(kStageActivations);
  digests.assign(static_cast<size_t>(T), 0);
  if (o.device.is_cuda()) {
    ENGINE_RETURN_IF_ERROR(mem.upload(digests_dev.data, digests.data(), digests.size() * 8));
  }
  return Status::Ok();
}

Status ModelRunner::Impl::synthesize(int layer, int64_t T) {
  clock.start(kStageActivations);
#if MSA_ENGINE_CUDA
  if (o.device.is_cuda()) {
    Status s = launch_synthesize_rows(o.seed, row, layer, token_ids.ptr<int64_t>(),
                                      token_pos64.ptr<int64_t>(), T, qkv.ptr<uint16_t>());
    clock.stop(kStageActivations);
    return s;
  }
#endif
  uint16_t* dst = qkv.ptr<uint16_t>();
  const Status st = detail::parallel_for(T, stream(), [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const float* qd = dirs.data() + t * 2 * dir_dim;
      const float* kd = qd + dir_dim;
      const uint64_t key =
          synth::row_key(o.seed, static_cast<uint64_t>(tok_id[static_cast<size_t>(t)]),
                         tok_pos[static_cast<size_t>(t)], layer);
      uint16_t* r = dst + t * width;
      for (int c = 0; c < width; ++c) {
        const int d = synth::row_element_dim(row, c);
        r[c] = float_to_bf16(synth::row_element(key, row, c, qd[d], kd[d]));
      }
    }
  });
  clock.stop(kStageActivations);
  return st;
}

Status ModelRunner::Impl::digest_layer(int layer, int64_t T) {
  const int n = o.shape.num_q_heads * o.shape.head_dim;
  clock.start(kStageReadback);
#if MSA_ENGINE_CUDA
  if (o.device.is_cuda()) {
    Status s = launch_fold_digests(out.ptr<float>(), T, n, layer, digests_dev.ptr<uint64_t>());
    clock.stop(kStageReadback);
    return s;
  }
#endif
  const float* src = out.ptr<float>();
  const Status st = detail::parallel_for(T, stream(), [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      digests[static_cast<size_t>(t)] = synth::fold_digest(
          digests[static_cast<size_t>(t)], synth::row_digest(src + t * n, n), layer);
    }
  });
  clock.stop(kStageReadback);
  return st;
}

Status ModelRunner::Impl::run_layer(int layer, const Batch& b, int64_t T,
                                    std::vector<FidelitySample>* samples) {
  const RankShape& sh = o.shape;
  const ModelConfig& m = o.model;
  const LayerBuffers& L = layers[static_cast<size_t>(layer)];
  const int nreq = static_cast<int>(b.requests.size());
  const int nd = b.num_decodes;
  const int64_t ndt = static_cast<int64_t>(nd) * b.decode_query_len;
  const int64_t npt = T - ndt;
  const int np = nreq - nd;
  const bool dense = o.dense_everywhere || L.kind == LayerKind::kDense;

  ENGINE_RETURN_IF_ERROR(synthesize(layer, T));

  FusedQkNormRopeArgs fa;
  fa.mode = dense ? PreAttentionMode::kDense
                  : (L.kind == LayerKind::kSparseCompute ? PreAttentionMode::kSparse
                                                         : PreAttentionMode::kSkipIndex);
  fa.num_q_heads = sh.num_q_heads;
  fa.num_kv_heads = sh.num_kv_heads;
  fa.num_index_heads = sh.num_index_heads;
  fa.rotary_dim = m.rotary_dim;
  fa.eps = static_cast<float>(m.rms_norm_eps);
  fa.qkv = qkv.slice(0, 0, T);
  fa.positions = token_position.slice(0, 0, T);
  fa.cos_sin_cache = rope;
  fa.q_norm_weight = q_norm;
  fa.k_norm_weight = k_norm;
  fa.slot_mapping = slot_mapping.slice(0, 0, T);
  fa.kv_cache = L.kv;
  fa.q_out = q_out.slice(0, 0, T);
  if (fa.mode == PreAttentionMode::kSparse) {
    fa.index_q_norm_weight = iq_norm;
    fa.index_k_norm_weight = ik_norm;
    fa.index_slot_mapping = index_slot_mapping.slice(0, 0, T);
    fa.index_cache = L.index_cache;
    fa.index_q_out = iq_out.slice(0, 0, T);
  }
  ENGINE_RETURN_IF_ERROR(run_op(fa, kStageInsert, "fused qk-norm/rope/insert"));

  const float scale = m.effective_softmax_scale();
  if (dense) {
    // Decode and prefill rows as two calls: the op picks its kernel by the shape of the call
    // (split-KV for a few rows per request, the tensor-core prefill kernel for long ones).
    if (nd > 0) {
      DenseAttentionArgs da;
      da.batch_invariant = o.batch_invariant;
      da.softmax_scale = scale;
      da.q = q_out.slice(0, 0, ndt);
      da.kv_cache = L.kv;
      da.block_table = block_table.slice(0, 0, nd);
      da.cu_seqlens_q = query_start_loc.slice(0, 0, nd + 1);
      da.seq_lens = seq_lens.slice(0, 0, nd);
      da.out = out.slice(0, 0, ndt);
      ENGINE_RETURN_IF_ERROR(run_op(da, kStageAttentionDecode, "dense attention (decode)"));
    }
    if (np > 0) {
      DenseAttentionArgs da;
      da.batch_invariant = o.batch_invariant;
      da.softmax_scale = scale;
      da.q = q_out.slice(0, ndt, npt);
      da.kv_cache = L.kv;
      da.block_table = block_table.slice(0, nd, np);
      da.cu_seqlens_q = prefill_cu.slice(0, 0, np + 1);
      da.seq_lens = seq_lens.slice(0, nd, np);
      da.out = out.slice(0, ndt, npt);
      ENGINE_RETURN_IF_ERROR(run_op(da, kStageAttentionPrefill, "dense attention (prefill)"));
    }
  } else {
    IndexTopkParams params;
    params.topk = m.sparse_topk_blocks;
    params.init_blocks = m.sparse_init_blocks;
    params.local_blocks = m.sparse_local_blocks;
    const int64_t max_t = o.max_batch_tokens;
    if (L.kind == LayerKind::kSparseCompute) {
      if (nd > 0) {
        IndexTopkDecodeArgs ia;
        ia.batch_invariant = o.batch_invariant;
        ia.params = params;
        ia.query_len = b.decode_query_len;
        ia.index_q = iq_out.slice(0, 0, ndt);
        ia.index_cache = L.index_cache;
        ia.block_table = index_block_table.slice(0, 0, nd);
        ia.seq_lens = seq_lens.slice(0, 0, nd);
        ia.topk_out = topk;
        ENGINE_RETURN_IF_ERROR(run_op(ia, kStageIndexerDecode, "index top-k (decode)"));
      }
      if (np > 0) {
        IndexTopkPrefillArgs ia;
        ia.batch_invariant = o.batch_invariant;
        ia.params = params;
        ia.index_q = iq_out.slice(0, ndt, npt);
        ia.index_cache = L.index_cache;
        ia.block_table = index_block_table.slice(0, nd, np);
        ia.cu_seqlens_q = prefill_cu.slice(0, 0, np + 1);
        ia.seq_lens = seq_lens.slice(0, nd, np);
        ia.topk_out = topk.slice(1, ndt, max_t - ndt);
        ENGINE_RETURN_IF_ERROR(run_op(ia, kStageIndexerPrefill, "index top-k (prefill)"));
        if (o.topk_union) ENGINE_RETURN_IF_ERROR(count_topk_union(b, ndt, npt));
      }
    }
    if (nd > 0) {
      SparseAttentionDecodeArgs sa;
      sa.batch_invariant = o.batch_invariant;
      sa.query_len = b.decode_query_len;
      sa.softmax_scale = scale;
      sa.q = q_out.slice(0, 0, ndt);
      sa.kv_cache = L.kv;
      sa.block_table = block_table.slice(0, 0, nd);
      sa.seq_lens = seq_lens.slice(0, 0, nd);
      sa.topk = topk;
      sa.out = out.slice(0, 0, ndt);
      ENGINE_RETURN_IF_ERROR(run_op(sa, kStageAttentionDecode, "sparse attention (decode)"));
    }
    if (np > 0) {
      SparseAttentionPrefillArgs sa;
      sa.batch_invariant = o.batch_invariant;
      sa.softmax_scale = scale;
      sa.q = q_out.slice(0, ndt, npt);
      sa.kv_cache = L.kv;
      sa.block_table = block_table.slice(0, nd, np);
      sa.cu_seqlens_q = prefill_cu.slice(0, 0, np + 1);
      sa.seq_lens = seq_lens.slice(0, nd, np);
      sa.topk = topk.slice(1, ndt, max_t - ndt);
      sa.out = out.slice(0, ndt, npt);
      ENGINE_RETURN_IF_ERROR(run_op(sa, kStageAttentionPrefill, "sparse attention (prefill)"));
    }
  }
  ENGINE_RETURN_IF_ERROR(digest_layer(layer, T));

  // Fidelity: one sparse layer per step (cycling), a few rows whose context exceeds what the
  // top-k can cover (elsewhere sparse attention is exact by construction).
  if (dense || o.fidelity_rows_per_step <= 0) return Status::Ok();
  std::vector<int> sparse_layers;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    if (layers[static_cast<size_t>(l)].kind != LayerKind::kDense) sparse_layers.push_back(l);
  }
  if (sparse_layers[static_cast<size_t>(b.step) % sparse_layers.size()] != layer) {
    return Status::Ok();
  }
  const int64_t cover = static_cast<int64_t>(m.sparse_topk_blocks) * m.sparse_block_size;
  std::vector<int64_t> eligible;
  for (int64_t t = 0; t < T; ++t) {
    if (tok_pos[static_cast<size_t>(t)] >= cover) eligible.push_back(t);
  }
  if (eligible.empty()) return Status::Ok();
  clock.start(kStageReadback);
  const uint64_t h = synth::hash(o.seed, synth::kTagSample, static_cast<uint64_t>(b.step));
  const int64_t n = static_cast<int64_t>(eligible.size());
  const int64_t k = std::min<int64_t>(o.fidelity_rows_per_step, n);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t t = eligible[static_cast<size_t>((h + static_cast<uint64_t>(i * n / k)) %
                                                   static_cast<uint64_t>(n))];
    FidelitySample fs;
    Status s = sample_fidelity(layer, b, t, &fs);
    if (!s.ok()) {
      clock.stop(kStageReadback);
      return s;
    }
    samples->push_back(fs);
  }
  clock.stop(kStageReadback);
  return Status::Ok();
}

// The prefill rows' top-k of every index head (rows [ndt, ndt + npt) of the step, requests from
// b.num_decodes on, in order), read back and counted on the host.
Status ModelRunner::Impl::count_topk_union(const Batch& b, int64_t ndt, int64_t npt) {
  const int K = o.model.sparse_topk_blocks;
  std::vector<int32_t> rows(static_cast<size_t>(npt * K));
  clock.start(kStageReadback);
  for (int h = 0; h < o.shape.num_index_heads; ++h) {
    const Status s = mem.download(
        rows.data(), topk.ptr<int32_t>() + (h * o.max_batch_tokens + ndt) * K, rows.size() * 4);
    if (!s.ok()) {
      clock.stop(kStageReadback);
      return s;
    }
    int64_t first = 0;
    for (size_t r = static_cast<size_t>(b.num_decodes); r < b.requests.size(); ++r) {
      const BatchRequest& req = b.requests[r];
      add_request_rows(rows.data() + first * K, K, req.start, req.num_rows, &topk_union);
      first += req.num_rows;
    }
  }
  clock.stop(kStageReadback);
  return Status::Ok();
}

Status ModelRunner::Impl::sample_fidelity(int layer, const Batch& b, int64_t t,
                                          FidelitySample* fs) {
  const RankShape& sh = o.shape;
  const int64_t bs = o.model.sparse_block_size;
  const int D = sh.head_dim;
  const int Hq = sh.num_q_heads;
  const int Hkv = sh.num_kv_heads;
  const int K = o.model.sparse_topk_blocks;
  const int group = Hq / Hkv;
  const LayerBuffers& L = layers[static_cast<size_t>(layer)];
  const BatchRequest& r = b.requests[static_cast<size_t>(tok_req[static_cast<size_t>(t)])];
  const int64_t p = tok_pos[static_cast<size_t>(t)];
  const int64_t nblocks = p / bs + 1;

  std::vector<uint16_t> q(static_cast<size_t>(Hq * D));
  std::vector<float> o_sparse(static_cast<size_t>(Hq * D));
  std::vector<int32_t> sel(static_cast<size_t>(Hkv * K));
  ENGINE_RETURN_IF_ERROR(mem.download(q.data(), q_out.ptr<uint16_t>() + t * Hq * D, q.size() * 2));
  ENGINE_RETURN_IF_ERROR(
      mem.download(o_sparse.data(), out.ptr<float>() + t * Hq * D, o_sparse.size() * 4));
  for (int g = 0; g < Hkv; ++g) {
    ENGINE_RETURN_IF_ERROR(mem.download(sel.data() + g * K,
                                        topk.ptr<int32_t>() + (g * o.max_batch_tokens + t) * K,
                                        static_cast<size_t>(K) * 4));
  }
  // The request's pages of this layer's cache: [Hkv, bs, 2D] each (packed layout).
  const int64_t page_elems = Hkv * bs * 2 * D;
  const int64_t esize = dtype_size(o.kv_dtype);
  std::vector<uint8_t> pages(static_cast<size_t>(nblocks * page_elems * esize));
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t page = (*r.kv_table)[static_cast<size_t>(blk)];
    ENGINE_RETURN_IF_ERROR(
        mem.download(pages.data() + blk * page_elems * esize,
                     static_cast<const uint8_t*>(L.kv.k.data) + page * page_elems * esize,
                     static_cast<size_t>(page_elems * esize)));
  }
  const float kv_scale = o.kv_dtype == DType::kE4M3 ? kv_scale_for_layer(layer) : 1.0f;
  const double scale = o.model.effective_softmax_scale();

  // Heads in parallel, each with its own scratch and sums; the sums are added in head order
  // afterwards, so the sample does not depend on the thread count.
  std::vector<double> head_err2(static_cast<size_t>(Hq)), head_ref2(static_cast<size_t>(Hq));
  std::vector<double> head_mass(static_cast<size_t>(Hq));
  const Status st = detail::parallel_for(Hq, stream(), [&](int64_t h_begin, int64_t h_end, int) {
    std::vector<double> logits(static_cast<size_t>(p + 1));
    std::vector<double> acc(static_cast<size_t>(D));
    std::vector<char> selected(static_cast<size_t>(nblocks));
    for (int64_t hh = h_begin; hh < h_end; ++hh) {
      const int h = static_cast<int>(hh);
      const int g = h / group;
      std::fill(selected.begin(), selected.end(), 0);
      for (int k = 0; k < K; ++k) {
        const int32_t id = sel[static_cast<size_t>(g * K + k)];
        if (id >= 0 && id < nblocks) selected[static_cast<size_t>(id)] = 1;
      }
      double mx = -1e300;
      for (int64_t j = 0; j <= p; ++j) {
        const int64_t base = ((j / bs) * Hkv + g) * bs * 2 * D + (j % bs) * 2 * D;
        double dot = 0.0;
        for (int d = 0; d < D; ++d) {
          dot += static_cast<double>(bf16_to_float(q[static_cast<size_t>(h * D + d)])) *
                 element_to_float(pages.data(), base + d, o.kv_dtype) * kv_scale;
        }
        logits[static_cast<size_t>(j)] = dot * scale;
        mx = std::max(mx, dot * scale);
      }
      double sum = 0.0, in_sel = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j <= p; ++j) {
        const double w = std::exp(logits[static_cast<size_t>(j)] - mx);
        sum += w;
        if (selected[static_cast<size_t>(j / bs)]) in_sel += w;
        const int64_t base = ((j / bs) * Hkv + g) * bs * 2 * D + (j % bs) * 2 * D + D;
        for (int d = 0; d < D; ++d) {
          acc[static_cast<size_t>(d)] +=
              w * element_to_float(pages.data(), base + d, o.kv_dtype) * kv_scale;
        }
      }
      double err2 = 0.0, ref2 = 0.0;
      for (int d = 0; d < D; ++d) {
        const double ref = acc[static_cast<size_t>(d)] / sum;
        const double diff = o_sparse[static_cast<size_t>(h * D + d)] - ref;
        err2 += diff * diff;
        ref2 += ref * ref;
      }
      head_err2[static_cast<size_t>(h)] = err2;
      head_ref2[static_cast<size_t>(h)] = ref2;
      head_mass[static_cast<size_t>(h)] = in_sel / sum;
    }
  });
  if (!st.ok()) return st;
  double err2 = 0.0, ref2 = 0.0, mass = 0.0;
  for (int h = 0; h < Hq; ++h) {
    err2 += head_err2[static_cast<size_t>(h)];
    ref2 += head_ref2[static_cast<size_t>(h)];
    mass += head_mass[static_cast<size_t>(h)];
  }
  fs->layer = layer;
  fs->position = p;
  fs->rel_error = ref2 > 0.0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  fs->selected_mass = mass / Hq;
  return Status::Ok();
}

ModelRunner::ModelRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ModelRunner::~ModelRunner() = default;

size_t ModelRunner::device_bytes() const { return impl_->mem.bytes_allocated(); }

Status ModelRunner::plan_bytes(const RunnerOptions& opts, int64_t* bytes) {
  std::vector<LayerKind> plan;
  ENGINE_RETURN_IF_ERROR(plan_topk_reuse(opts.model, &plan));
  int64_t total = 0;
  for (const BufferSpec& b : Impl::buffers(opts, plan, nullptr)) {
    int64_t n = 0;
    ENGINE_RETURN_IF_ERROR(buffer_bytes(b, &n));
    if (__builtin_add_overflow(total, n, &total)) {
      return Status(StatusCode::kInvalidArgument,
                    "the runner's buffers do not fit int64 bytes (model or workload too large)");
    }
  }
  *bytes = total;
  return Status::Ok();
}

Status ModelRunner::create(const RunnerOptions& opts, std::unique_ptr<ModelRunner>* out) {
  if (opts.device.is_cuda()) {
#if !MSA_ENGINE_CUDA
    return Status(StatusCode::kNotSupported,
                  "--backend cuda: this build has no CUDA support (configure with "
                  "-DMSA_WITH_CUDA=ON)");
#endif
  }
  // Nothing is allocated before the whole plan is known to fit.
  int64_t planned = 0;
  ENGINE_RETURN_IF_ERROR(plan_bytes(opts, &planned));
  size_t capacity = 0;
  ENGINE_RETURN_IF_ERROR(device_capacity_bytes(opts.device, &capacity));
  if (static_cast<uint64_t>(planned) > capacity) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    char msg[512];
    std::snprintf(msg, sizeof(msg),
                  "the model and workload need %.1f GiB of %s buffers (%d layers' caches of %d "
                  "pages, activations for %d tokens per step), more than the %.1f GiB %s; "
                  "lower --kv-blocks, --max-batch-tokens or the model size",
                  static_cast<double>(planned) / gib, opts.device.is_cuda() ? "GPU" : "host",
                  opts.model.num_layers, opts.num_blocks, opts.max_batch_tokens,
                  static_cast<double>(capacity) / gib,
                  opts.device.is_cuda() ? "free on the GPU" : "of memory of this machine");
    return Status(StatusCode::kInvalidArgument, msg);
  }
  auto impl = std::make_unique<Impl>(opts);
  ENGINE_RETURN_IF_ERROR(impl->init());
  std::unique_ptr<ModelRunner> r(new ModelRunner(std::move(impl)));
  for (const auto& l : r->impl_->layers) r->plan_.push_back(l.kind);
  *out = std::move(r);
  return Status::Ok();
}

Status ModelRunner::execute(const Batch& b, StepOutput* out) {
  Impl& im = *impl_;
  int64_t T = 0;
  out->samples.clear();
  im.invariant_op_calls = 0;
  im.variant_op_calls = 0;
  im.topk_union = TopkUnion{};
  ENGINE_RETURN_IF_ERROR(im.prepare_step(b, &T));
  for (int l = 0; l < static_cast<int>(im.layers.size()); ++l) {
    ENGINE_RETURN_IF_ERROR(im.run_layer(l, b, T, &out->samples));
  }
  if (im.o.device.is_cuda()) {
    im.clock.start(kStageReadback);
    ENGINE_RETURN_IF_ERROR(
        im.mem.download(im.digests.data(), im.digests_dev.data, im.digests.size() * 8));
    im.clock.stop(kStageReadback);
  }
  ENGINE_RETURN_IF_ERROR(im.mem.synchronize());
  out->digests = im.digests;
  out->invariant_op_calls = im.invariant_op_calls;
  out->variant_op_calls = im.variant_op_calls;
  out->topk_union = im.topk_union;
  return im.clock.collect(&out->stages);
}

}  // namespace engine
}  // namespace msa
