// Fused pre-attention op (spec A11, B5): per-head Gemma RMSNorm and partial NeoX RoPE on q, k,
// index_q and index_k, K/V inserted into the paged main cache, index_k into the index cache.
#pragma once

#include "msa/cache.h"
#include "msa/tensor.h"

namespace msa {

enum class PreAttentionMode : int32_t {
  kDense = 0,      // no index branch; qkv rows are [q | k | v] (or the 5-part sparse row)
  kSparse = 1,     // index branch on: index_q / index_k normed, roped, index_k inserted
  kSkipIndex = 2,  // 5-part sparse row, index segments left bit-unchanged; an index cache (and
                   // index slots) may be passed through and is left untouched
};

// Per token t with position p = positions[t]:
//   q_h  <- RoPE_p(GemmaNorm(q_h;  q_norm_weight))   -> q_out[t, h] if given, else in place
//   k_g  <- RoPE_p(GemmaNorm(k_g;  k_norm_weight))   -> in place, and K cache at slot_mapping[t]
//   v_g  unchanged in qkv                            -> V cache at slot_mapping[t]
//   iq_h <- RoPE_p(GemmaNorm(iq_h; index_q_norm_weight)) -> index_q_out if given, else in place
//   ik   <- RoPE_p(GemmaNorm(ik;   index_k_norm_weight)) -> in place, and index cache at
//                                                          index_slot_mapping[t]
// GemmaNorm(x; w) = x * rsqrt(mean(x^2) + eps) * (1 + w); RoPE rotates dims [0, rotary_dim)
// NeoX style (pairs (i, i + rotary_dim/2)). Arithmetic in fp32 from the input dtype, rounded
// once to the output dtype; fp8 outputs are e4m3(x / scale) with round-to-nearest-even and
// saturation. A negative slot writes nothing to that cache. A row with a negative position is
// a padding row: its q_out / index_q_out rows are written with zeros, qkv and caches are left
// unchanged.
struct FusedQkNormRopeArgs {
  PreAttentionMode mode = PreAttentionMode::kSparse;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int num_index_heads = 0;  // sparse / skip-index rows carry this many index-q heads
  int rotary_dim = 64;      // even, <= head_dim
  float eps = 1e-6f;

  // [T, W] bf16 or f16, last stride 1. W = (nq + 2 nkv) * D in dense mode, or
  // (nq + 2 nkv + niq) * D + Di with index rows; dense mode accepts the wider row and ignores
  // the index segments. Modified in place as described above.
  TensorView qkv;
  TensorView positions;      // [T] i64 or i32
  TensorView cos_sin_cache;  // [max_pos, rotary_dim] f32 / bf16 / f16: cos half, then sin half
  TensorView q_norm_weight;  // [D], qkv dtype or f32
  TensorView k_norm_weight;  // [D]
  TensorView index_q_norm_weight;  // [Di], sparse mode only
  TensorView index_k_norm_weight;  // [Di], sparse mode only

  // Optional K/V insert: both slot_mapping and kv_cache, or neither.
  TensorView slot_mapping;  // [T] i64 or i32; slot = page * block_size + offset; < 0 = skip
  KvCacheView kv_cache;     // Hkv == num_kv_heads, head_dim == D

  // Optional index-key insert (sparse mode): index_cache given => inserted at
  // index_slot_mapping (or slot_mapping when index_slot_mapping is not given). In skip-index
  // mode both are accepted and neither is read or written; dense mode rejects them.
  TensorView index_slot_mapping;  // [T] i64 or i32
  TensorView index_cache;         // [num_blocks, block_size, Di] bf16 or e4m3

  TensorView q_out;        // optional [T, nq, D] (or [T, nq * D]), qkv dtype
  TensorView index_q_out;  // optional [T, niq, Di] (or [T, niq * Di]), bf16 or e4m3 (no scale)
  TensorView error_flags;  // optional [1] i32 (DeviceError bits)
};

Status check(const FusedQkNormRopeArgs& args);
Status workspace_size(const FusedQkNormRopeArgs& args, size_t* bytes);
Status run(const FusedQkNormRopeArgs& args, Workspace workspace, Stream stream);

// cos_sin_out [max_pos, rotary_dim] f32: row p = [cos(p * f_i) for i < r/2, sin(p * f_i) ...],
// f_i = theta^(-2i / rotary_dim), computed in fp64 and rounded once to fp32.
struct RopeCacheArgs {
  double theta = 5e6;
  TensorView cos_sin_out;
};

Status check(const RopeCacheArgs& args);
Status workspace_size(const RopeCacheArgs& args, size_t* bytes);
Status run(const RopeCacheArgs& args, Workspace workspace, Stream stream);

}  // namespace msa
