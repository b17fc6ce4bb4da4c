// Same-call timing driver for A/B comparisons of library builds (bench/ab/README.md): times
// msa::run of the decode index top-k op, of the sparse attention decode op and of the whole
// decode step at M3 TP4-rank shapes (H_idx 1, Hq 16 on Hkv 1, head dims 128, block 128, top-16)
// by CUDA-graph replay, with L2 flushed by a 256 MiB read before each replay, and prints one line
// per case: the median and minimum over 40 replays and a hash of the op's output, so builds that
// should give the same bits can be checked to. Inputs are deterministic (hash-filled caches, seeded
// page permutation, seeded ragged lengths and top-k ids), so every build sees the same data.
//
//   op_ab [OPS] [CTX BATCH QLEN]
//
// OPS: all (the default: index, attention and step), or a comma-separated list of index,
// index-shapes, attention, attention-layer, step, dense-prefill, sparse-prefill, index-prefill
// and decode-step. index-shapes (not in all) times the index op at the scorer instances the
// default cases do not reach: over e4m3 keys at head dim 64 (index_d64), with bf16 queries
// (index_qbf16) and both (index_d64_qbf16); over bf16 keys at head dims 192 and 256 (index_d192,
// index_d256). attention-layer (not in all) times the attention op's fp8 cases with a per-layer
// scale of 1/16 (as decode_bench.py and the step use; the attention cases use per-token-head
// scales). decode-step (not in all) times msa::SparseDecodeStepArgs (index top-k, then attention;
// bf16, batch 1-16, 8K-128K) twice on the same inputs, with MSA_CUDA_DECODE_STEP=chain and
// =persistent (lines decode_step_chain and decode_step_persistent; equal hashes: the same bits).
// The optional triple keeps only the cases of that shape (both dtypes, uniform and ragged), e.g.
// to profile one of them with ncu. MSA_AB_WARM_CODE=1 replays an identical problem on other
// buffers between the flush and each timed replay (see warm_code_mode). MSA_AB_DTYPE=bf16 or fp8
// keeps only the cases of that cache dtype. MSA_AB_TOPK=shared gives sparse-prefill a top-k whose
// neighbouring tokens share blocks (run_prefill).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "msa/attention.h"
#include "msa/cache.h"
#include "msa/decode_step.h"
#include "msa/fused_qknorm_rope.h"
#include "msa/indexer.h"

namespace {

#define AB_CHECK(x)                                                          \
  do {                                                                       \
    const cudaError_t e_ = (x);                                              \
    if (e_ != cudaSuccess) {                                                 \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      return false;                                                          \
    }                                                                        \
  } while (0)

constexpr int kBlock = 128, kDim = 128, kTopk = 16, kQHeads = 16;
constexpr int kReplays = 45, kWarmup = 5;

__global__ void flush_read(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    acc ^= p[i].x;
  }
  if (acc == 0x12345678u) *sink = acc;
}

__device__ unsigned mix(size_t i, unsigned seed) {
  unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return h;
}

// n elements: bf16 in [-0.5, 0.5), or finite e4m3 bytes (never 0x7f / 0xff).
__global__ void fill(void* p, size_t n, unsigned seed, bool e4m3) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const unsigned h = mix(i, seed);
    if (e4m3) {
      static_cast<unsigned char*>(p)[i] =
          static_cast<unsigned char>((h & 0x77) | ((h >> 8) & 0x80));
    } else {
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16((h & 0xFFFF) / 65536.0f - 0.5f);
    }
  }
}

__global__ void fill_f32(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = v;
  }
}

struct Case {
  int ctx, batch, qlen;
  bool fp8, ragged;
  int dim = kDim;            // index head dim (the index op only)
  bool q_bf16 = false;       // bf16 index queries over fp8 keys (the index op only)
  bool layer_scale = false;  // fp8 K/V with a per-layer scale (the attention op only)
};

// Device buffers of one case, freed on scope exit.
struct Buffers {
  std::vector<void*> ptrs;
  ~Buffers() {
    for (void* p : ptrs) cudaFree(p);
  }
  template <typename T>
  bool alloc(T** p, size_t bytes) {
    if (cudaMalloc(reinterpret_cast<void**>(p), bytes) != cudaSuccess) return false;
    ptrs.push_back(*p);
    return true;
  }
};

// The op of arguments `a` (which must outlive it) on stream s: its workspace sized and allocated
// in b, msa::run's errors printed under `name`. False, having printed why, when either fails.
template <typename Args>
bool bind_op(const char* name, const Args& a, Buffers& b, cudaStream_t s,
             std::function<bool()>* op) {
  size_t ws_bytes = 0;
  const msa::Status st = msa::workspace_size(a, &ws_bytes);
  void* ws = nullptr;
  if (!st.ok() || !b.alloc(&ws, ws_bytes + 256)) {
    std::printf("%s: workspace: %s\n", name, st.message().c_str());
    return false;
  }
  const msa::Stream stream{s, 0};
  *op = [name, &a, ws, ws_bytes, stream] {
    const msa::Status r = msa::run(a, msa::Workspace{ws, ws_bytes}, stream);
    if (!r.ok()) std::printf("%s: %s\n", name, r.message().c_str());
    return r.ok();
  };
  return true;
}

struct Flush {
  uint4* buf = nullptr;
  size_t n = 0;
  unsigned* sink = nullptr;
};

uint64_t fnv(const void* data, size_t bytes) {
  const unsigned char* b = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// The fnv hash of device buffers' bytes, one after the other (an op's outputs).
bool hash_device(std::initializer_list<std::pair<const void*, size_t>> parts, uint64_t* h) {
  std::vector<unsigned char> host;
  for (const auto& [ptr, bytes] : parts) {
    const size_t at = host.size();
    host.resize(at + bytes);
    AB_CHECK(cudaMemcpy(host.data() + at, ptr, bytes, cudaMemcpyDeviceToHost));
  }
  *h = fnv(host.data(), host.size());
  return true;
}

// MSA_AB_WARM_CODE=1: each timed replay follows the flush and one replay of an identical
// problem on other buffers, so the kernels' code, and whatever else the two share, is in the
// caches while the timed problem's own data are not (a probe of what the cold start costs).
bool warm_code_mode() {
  const char* v = std::getenv("MSA_AB_WARM_CODE");
  return v != nullptr && std::string(v) == "1";
}

// Captures `op` in a graph (instantiated into *exec).
bool capture(cudaStream_t s, const std::function<bool()>& op, cudaGraphExec_t* exec) {
  cudaGraph_t graph;
  AB_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  const bool captured = op();
  AB_CHECK(cudaStreamEndCapture(s, &graph));
  if (!captured) return false;
  AB_CHECK(cudaGraphInstantiate(exec, graph, 0));
  AB_CHECK(cudaGraphDestroy(graph));
  return true;
}

// Runs `op` once (its output hashed by `hash`), then captures it in a graph and times kReplays
// replays after a flush each (and a replay of `warm`, when given); prints the line.
bool time_op(const char* name, const Case& c, cudaStream_t s, const Flush& fl,
             const std::function<bool()>& op, const std::function<bool(uint64_t*)>& hash,
             const std::function<bool()>* warm) {
  if (!op()) return false;
  AB_CHECK(cudaStreamSynchronize(s));
  uint64_t h = 0;
  if (!hash(&h)) return false;
  cudaGraphExec_t exec, warm_exec = nullptr;
  if (!capture(s, op, &exec)) return false;
  if (warm != nullptr && !capture(s, *warm, &warm_exec)) return false;
  cudaEvent_t e0, e1;
  AB_CHECK(cudaEventCreate(&e0));
  AB_CHECK(cudaEventCreate(&e1));
  std::vector<float> us;
  for (int it = 0; it < kReplays; ++it) {
    flush_read<<<1056, 256, 0, s>>>(fl.buf, fl.n, fl.sink);
    if (warm_exec != nullptr) AB_CHECK(cudaGraphLaunch(warm_exec, s));
    AB_CHECK(cudaEventRecord(e0, s));
    AB_CHECK(cudaGraphLaunch(exec, s));
    AB_CHECK(cudaEventRecord(e1, s));
    AB_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    AB_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (it >= kWarmup) us.push_back(ms * 1000.0f);
  }
  std::sort(us.begin(), us.end());
  std::printf("%s%s ctx %6d B %2d q%d %s %s: median %7.1f us (min %7.1f) hash %016llx\n", name,
              warm_exec != nullptr ? "_warmcode" : "", c.ctx, c.batch, c.qlen,
              c.fp8 ? "fp8 " : "bf16", c.ragged ? "ragged" : "uniform", us[us.size() / 2], us[0],
              static_cast<unsigned long long>(h));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  if (warm_exec != nullptr) cudaGraphExecDestroy(warm_exec);
  return true;
}

// Page table (a seeded permutation of the pool) and sequence lengths (the context, or seeded
// draws in [1K, context]) of a case.
void batch_metadata(const Case& c, int pool, std::vector<int32_t>* table,
                    std::vector<int32_t>* lens) {
  const int nb = c.ctx / kBlock;
  std::vector<int32_t> pages(pool);
  std::iota(pages.begin(), pages.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(pages.begin(), pages.end(), rng);
  table->assign(pages.begin(), pages.begin() + static_cast<size_t>(c.batch) * nb);
  lens->assign(c.batch, c.ctx);
  if (c.ragged) {
    std::mt19937 lr(11);
    std::uniform_int_distribution<int> draw(1024, c.ctx);
    for (int32_t& l : *lens) l = draw(lr);
  }
}

// The packed cache [pool, 1, 128, 2 x 128] over `kv`, with per-layer scales (K's at
// layer_scales[0], V's at [1]) when layer_scales is not null.
msa::Status packed_cache(void* kv, msa::DType dtype, int pool, float* layer_scales,
                         const msa::Device& dev, msa::KvCacheView* cache) {
  msa::Status st = msa::make_packed_kv_cache(
      msa::make_tensor(kv, dtype, {pool, 1, kBlock, 2 * kDim}, dev), cache);
  if (st.ok() && layer_scales != nullptr) {
    st = msa::set_kv_scales(cache, msa::KvScaleMode::kPerLayer,
                            msa::make_tensor(layer_scales, msa::DType::kF32, {1}, dev),
                            msa::make_tensor(layer_scales + 1, msa::DType::kF32, {1}, dev));
  }
  return st;
}

// Each run_* builds one problem; in MSA_AB_WARM_CODE mode the first builds a second, identical one
// (its own buffers) and times it with its own op as the warm-up.
bool run_index(const Case& c, cudaStream_t s, const Flush& fl,
               const std::function<bool()>* warm = nullptr) {
  const int nb = c.ctx / kBlock, T = c.batch * c.qlen, pool = c.batch * nb + 8, di = c.dim;
  const size_t es = c.fp8 ? 1 : 2;
  const msa::DType dt = c.fp8 ? msa::DType::kE4M3 : msa::DType::kBF16;
  const bool q_fp8 = c.fp8 && !c.q_bf16;
  const msa::DType qt = q_fp8 ? msa::DType::kE4M3 : msa::DType::kBF16;
  Buffers b;
  void *cache, *q;
  int32_t *bt, *sl, *tk;
  if (!b.alloc(&cache, static_cast<size_t>(pool) * kBlock * di * es) ||
      !b.alloc(&q, static_cast<size_t>(T) * di * (q_fp8 ? 1 : 2)) ||
      !b.alloc(&bt, static_cast<size_t>(c.batch) * nb * 4) || !b.alloc(&sl, c.batch * 4u) ||
      !b.alloc(&tk, static_cast<size_t>(T) * kTopk * 4)) {
    std::printf("index: allocation failed\n");
    return false;
  }
  fill<<<1024, 256>>>(cache, static_cast<size_t>(pool) * kBlock * di, 1, c.fp8);
  fill<<<64, 256>>>(q, static_cast<size_t>(T) * di, 2, q_fp8);
  std::vector<int32_t> table, lens;
  batch_metadata(c, pool, &table, &lens);
  AB_CHECK(cudaMemcpy(bt, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(sl, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  const msa::Device dev = msa::Device::cuda(0);
  msa::IndexTopkDecodeArgs a;
  a.query_len = c.qlen;
  a.index_q = msa::make_tensor(q, qt, {T, 1, di}, dev);
  a.index_cache = msa::make_tensor(cache, dt, {pool, kBlock, di}, dev);
  a.block_table = msa::make_tensor(bt, msa::DType::kI32, {c.batch, nb}, dev);
  a.seq_lens = msa::make_tensor(sl, msa::DType::kI32, {c.batch}, dev);
  a.topk_out = msa::make_tensor(tk, msa::DType::kI32, {1, T, kTopk}, dev);
  std::function<bool()> op;
  if (!bind_op("index", a, b, s, &op)) return false;
  auto hash = [&](uint64_t* h) {
    return hash_device({{tk, static_cast<size_t>(T) * kTopk * 4}}, h);
  };
  const std::string name = std::string("index") +
                           (di != kDim ? "_d" + std::to_string(di) : std::string()) +
                           (c.q_bf16 ? "_qbf16" : "");
  if (warm == nullptr && warm_code_mode()) {
    const std::function<bool()> warm_op = op;
    return run_index(c, s, fl, &warm_op);
  }
  return time_op(name.c_str(), c, s, fl, op, hash, warm);
}

bool run_attention(const Case& c, cudaStream_t s, const Flush& fl,
                   const std::function<bool()>* warm = nullptr) {
  const int nb = c.ctx / kBlock, T = c.batch * c.qlen, pool = c.batch * nb + 8;
  const size_t es = c.fp8 ? 1 : 2;
  const size_t cache_elems = static_cast<size_t>(pool) * kBlock * kDim;
  const msa::DType kd = c.fp8 ? msa::DType::kE4M3 : msa::DType::kBF16;
  Buffers b;
  void *k, *v, *q, *out;
  float *ks = nullptr, *vs = nullptr;
  int32_t *bt, *sl, *tk;
  const size_t rows_bytes = static_cast<size_t>(T) * kQHeads * kDim * 2;
  if (!b.alloc(&k, cache_elems * es) || !b.alloc(&v, cache_elems * es) ||
      !b.alloc(&q, rows_bytes) || !b.alloc(&out, rows_bytes) ||
      !b.alloc(&bt, static_cast<size_t>(c.batch) * nb * 4) || !b.alloc(&sl, c.batch * 4u) ||
      !b.alloc(&tk, static_cast<size_t>(T) * kTopk * 4) ||
      (c.fp8 && (!b.alloc(&ks, static_cast<size_t>(pool) * kBlock * 4) ||
                 !b.alloc(&vs, static_cast<size_t>(pool) * kBlock * 4)))) {
    std::printf("attention: allocation failed\n");
    return false;
  }
  fill<<<1024, 256>>>(k, cache_elems, 1, c.fp8);
  fill<<<1024, 256>>>(v, cache_elems, 2, c.fp8);
  fill<<<64, 256>>>(q, static_cast<size_t>(T) * kQHeads * kDim, 3, false);
  if (c.fp8) {
    fill_f32<<<256, 256>>>(ks, static_cast<size_t>(pool) * kBlock, c.layer_scale ? 0.0625f : 0.05f);
    fill_f32<<<256, 256>>>(vs, static_cast<size_t>(pool) * kBlock, c.layer_scale ? 0.0625f : 0.02f);
  }
  std::vector<int32_t> table, lens;
  batch_metadata(c, pool, &table, &lens);
  // Top-k rows: the own block and up to 15 other visible blocks drawn at random, ascending.
  std::vector<int32_t> ids_all(static_cast<size_t>(T) * kTopk);
  std::mt19937 rng(13);
  for (int t = 0; t < T; ++t) {
    const int pos = lens[t / c.qlen] - c.qlen + t % c.qlen, own = pos / kBlock;
    std::vector<int32_t> ids(own);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(std::min(kTopk - 1, own));
    ids.push_back(own);
    std::sort(ids.begin(), ids.end());
    ids.resize(kTopk, -1);
    std::copy(ids.begin(), ids.end(), ids_all.begin() + static_cast<size_t>(t) * kTopk);
  }
  AB_CHECK(cudaMemcpy(bt, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(sl, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(tk, ids_all.data(), ids_all.size() * 4, cudaMemcpyHostToDevice));
  const msa::Device dev = msa::Device::cuda(0);
  msa::SparseAttentionDecodeArgs a;
  a.query_len = c.qlen;
  a.q = msa::make_tensor(q, msa::DType::kBF16, {T, kQHeads, kDim}, dev);
  a.kv_cache.k = msa::make_tensor(k, kd, {pool, 1, kBlock, kDim}, dev);
  a.kv_cache.v = msa::make_tensor(v, kd, {pool, 1, kBlock, kDim}, dev);
  if (c.fp8) {
    const msa::Status st =
        c.layer_scale
            ? msa::set_kv_scales(&a.kv_cache, msa::KvScaleMode::kPerLayer,
                                 msa::make_tensor(ks, msa::DType::kF32, {1}, dev),
                                 msa::make_tensor(vs, msa::DType::kF32, {1}, dev))
            : msa::set_kv_scales(&a.kv_cache, msa::KvScaleMode::kPerTokenHead,
                                 msa::make_tensor(ks, msa::DType::kF32, {1, pool * kBlock}, dev),
                                 msa::make_tensor(vs, msa::DType::kF32, {1, pool * kBlock}, dev));
    if (!st.ok()) {
      std::printf("attention: scales: %s\n", st.message().c_str());
      return false;
    }
  }
  a.block_table = msa::make_tensor(bt, msa::DType::kI32, {c.batch, nb}, dev);
  a.seq_lens = msa::make_tensor(sl, msa::DType::kI32, {c.batch}, dev);
  a.topk = msa::make_tensor(tk, msa::DType::kI32, {1, T, kTopk}, dev);
  a.out = msa::make_tensor(out, msa::DType::kBF16, {T, kQHeads, kDim}, dev);
  std::function<bool()> op;
  if (!bind_op("attention", a, b, s, &op)) return false;
  auto hash = [&](uint64_t* h) { return hash_device({{out, rows_bytes}}, h); };
  if (warm == nullptr && warm_code_mode()) {
    const std::function<bool()> warm_op = op;
    return run_attention(c, s, fl, &warm_op);
  }
  return time_op(c.layer_scale ? "attention_layer" : "attention", c, s, fl, op, hash, warm);
}

// One sparse layer's decode step as decode_bench.py runs it: the fused insert (norms, RoPE, K/V
// and index-key insert of the new rows, sparse mode), the index top-k op and the sparse
// attention op, captured in one graph; the hash is of the attention output. fp8: e4m3 K/V with
// a per-layer scale and e4m3 index keys and queries.
bool run_step(const Case& c, cudaStream_t s, const Flush& fl,
              const std::function<bool()>* warm = nullptr) {
  constexpr int kRotary = 64, kWidth = (kQHeads + 2 + 1) * kDim + kDim;  // q | k | v | iq | ik
  const int nb = c.ctx / kBlock, T = c.batch * c.qlen, pool = c.batch * nb + 8;
  const size_t es = c.fp8 ? 1 : 2;
  const msa::DType cd = c.fp8 ? msa::DType::kE4M3 : msa::DType::kBF16;
  Buffers b;
  void *kv, *icache, *iq_out;
  __nv_bfloat16 *qkv, *q_out, *out, *weights;
  float *cos_sin, *scales;
  int32_t *bt, *sl, *positions, *slots, *tk;
  const size_t kv_elems = static_cast<size_t>(pool) * kBlock * 2 * kDim;
  const size_t rows_bytes = static_cast<size_t>(T) * kQHeads * kDim * 2;
  if (!b.alloc(&kv, kv_elems * es) ||
      !b.alloc(&icache, static_cast<size_t>(pool) * kBlock * kDim * es) ||
      !b.alloc(&iq_out, static_cast<size_t>(T) * kDim * es) ||
      !b.alloc(&qkv, static_cast<size_t>(T) * kWidth * 2) || !b.alloc(&q_out, rows_bytes) ||
      !b.alloc(&out, rows_bytes) || !b.alloc(&weights, 4 * kDim * 2) ||
      !b.alloc(&cos_sin, static_cast<size_t>(c.ctx) * kRotary * 4) || !b.alloc(&scales, 2 * 4) ||
      !b.alloc(&bt, static_cast<size_t>(c.batch) * nb * 4) || !b.alloc(&sl, c.batch * 4u) ||
      !b.alloc(&positions, T * 4u) || !b.alloc(&slots, T * 4u) ||
      !b.alloc(&tk, static_cast<size_t>(T) * kTopk * 4)) {
    std::printf("step: allocation failed\n");
    return false;
  }
  fill<<<1024, 256>>>(kv, kv_elems, 1, c.fp8);
  fill<<<1024, 256>>>(icache, static_cast<size_t>(pool) * kBlock * kDim, 2, c.fp8);
  fill<<<64, 256>>>(qkv, static_cast<size_t>(T) * kWidth, 3, false);
  fill<<<4, 256>>>(weights, 4 * kDim, 4, false);
  fill_f32<<<1024, 256>>>(cos_sin, static_cast<size_t>(c.ctx) * kRotary, 0.7071f);
  fill_f32<<<1, 32>>>(scales, 2, 1.0f / 16);
  std::vector<int32_t> table, lens;
  batch_metadata(c, pool, &table, &lens);
  std::vector<int32_t> pos(T), slot(T);
  for (int t = 0; t < T; ++t) {
    const int req = t / c.qlen;
    pos[t] = lens[req] - c.qlen + t % c.qlen;
    slot[t] = table[static_cast<size_t>(req) * nb + pos[t] / kBlock] * kBlock + pos[t] % kBlock;
  }
  AB_CHECK(cudaMemcpy(bt, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(sl, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(positions, pos.data(), pos.size() * 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(slots, slot.data(), slot.size() * 4, cudaMemcpyHostToDevice));
  const msa::Device dev = msa::Device::cuda(0);
  msa::KvCacheView cache;
  msa::Status st = packed_cache(kv, cd, pool, c.fp8 ? scales : nullptr, dev, &cache);
  if (!st.ok()) {
    std::printf("step: cache: %s\n", st.message().c_str());
    return false;
  }
  const msa::TensorView index_cache = msa::make_tensor(icache, cd, {pool, kBlock, kDim}, dev);
  const msa::TensorView block_table = msa::make_tensor(bt, msa::DType::kI32, {c.batch, nb}, dev);
  const msa::TensorView seq_lens = msa::make_tensor(sl, msa::DType::kI32, {c.batch}, dev);
  msa::FusedQkNormRopeArgs ins;
  ins.mode = msa::PreAttentionMode::kSparse;
  ins.num_q_heads = kQHeads;
  ins.num_kv_heads = 1;
  ins.num_index_heads = 1;
  ins.rotary_dim = kRotary;
  ins.qkv = msa::make_tensor(qkv, msa::DType::kBF16, {T, kWidth}, dev);
  ins.positions = msa::make_tensor(positions, msa::DType::kI32, {T}, dev);
  ins.cos_sin_cache = msa::make_tensor(cos_sin, msa::DType::kF32, {c.ctx, kRotary}, dev);
  ins.q_norm_weight = msa::make_tensor(weights, msa::DType::kBF16, {kDim}, dev);
  ins.k_norm_weight = msa::make_tensor(weights + kDim, msa::DType::kBF16, {kDim}, dev);
  ins.index_q_norm_weight = msa::make_tensor(weights + 2 * kDim, msa::DType::kBF16, {kDim}, dev);
  ins.index_k_norm_weight = msa::make_tensor(weights + 3 * kDim, msa::DType::kBF16, {kDim}, dev);
  ins.slot_mapping = msa::make_tensor(slots, msa::DType::kI32, {T}, dev);
  ins.kv_cache = cache;
  ins.index_cache = index_cache;
  ins.q_out = msa::make_tensor(q_out, msa::DType::kBF16, {T, kQHeads, kDim}, dev);
  ins.index_q_out = msa::make_tensor(iq_out, cd, {T, 1, kDim}, dev);
  msa::IndexTopkDecodeArgs idx;
  idx.query_len = c.qlen;
  idx.index_q = ins.index_q_out;
  idx.index_cache = index_cache;
  idx.block_table = block_table;
  idx.seq_lens = seq_lens;
  idx.topk_out = msa::make_tensor(tk, msa::DType::kI32, {1, T, kTopk}, dev);
  msa::SparseAttentionDecodeArgs att;
  att.query_len = c.qlen;
  att.q = ins.q_out;
  att.kv_cache = cache;
  att.block_table = block_table;
  att.seq_lens = seq_lens;
  att.topk = idx.topk_out;
  att.out = msa::make_tensor(out, msa::DType::kBF16, {T, kQHeads, kDim}, dev);
  size_t ws_ins = 0, ws_idx = 0, ws_att = 0;
  st = msa::workspace_size(ins, &ws_ins);
  if (st.ok()) st = msa::workspace_size(idx, &ws_idx);
  if (st.ok()) st = msa::workspace_size(att, &ws_att);
  const size_t ws_bytes = std::max({ws_ins, ws_idx, ws_att});
  void* ws;
  if (!st.ok() || !b.alloc(&ws, ws_bytes + 256)) {
    std::printf("step: workspace: %s\n", st.message().c_str());
    return false;
  }
  const msa::Stream stream{s, 0};
  auto op = [&] {
    msa::Status r = msa::run(ins, msa::Workspace{ws, ws_ins}, stream);
    if (r.ok()) r = msa::run(idx, msa::Workspace{ws, ws_idx}, stream);
    if (r.ok()) r = msa::run(att, msa::Workspace{ws, ws_att}, stream);
    if (!r.ok()) std::printf("step: %s\n", r.message().c_str());
    return r.ok();
  };
  auto hash = [&](uint64_t* h) { return hash_device({{out, rows_bytes}}, h); };
  if (warm == nullptr && warm_code_mode()) {
    const std::function<bool()> warm_op = op;
    return run_step(c, s, fl, &warm_op);
  }
  return time_op("step", c, s, fl, op, hash, warm);
}

// The decode step after the fused insert as one op (msa::SparseDecodeStepArgs: the index top-k,
// then sparse attention over the blocks it selects) on a packed bf16 cache with bf16 index keys
// and queries, timed twice on the same inputs: with MSA_CUDA_DECODE_STEP=chain (the two ops) and
// =persistent (the one cooperative kernel, docs/decode_step.md). The op reads the variable at
// every call and time_op captures each path's own graph; the hash is of the attention output and
// the top-k rows, so equal hashes mean bitwise equal outputs of the two paths.
bool run_decode_step(const Case& c, cudaStream_t s, const Flush& fl,
                     const std::function<bool()>* warm = nullptr) {
  const int nb = c.ctx / kBlock, T = c.batch * c.qlen, pool = c.batch * nb + 8;
  Buffers b;
  void *kv, *icache, *iq, *q, *out;
  int32_t *bt, *sl, *tk;
  const size_t kv_elems = static_cast<size_t>(pool) * kBlock * 2 * kDim;
  const size_t rows_bytes = static_cast<size_t>(T) * kQHeads * kDim * 2;
  const size_t topk_bytes = static_cast<size_t>(T) * kTopk * 4;
  if (!b.alloc(&kv, kv_elems * 2) ||
      !b.alloc(&icache, static_cast<size_t>(pool) * kBlock * kDim * 2) ||
      !b.alloc(&iq, static_cast<size_t>(T) * kDim * 2) || !b.alloc(&q, rows_bytes) ||
      !b.alloc(&out, rows_bytes) || !b.alloc(&bt, static_cast<size_t>(c.batch) * nb * 4) ||
      !b.alloc(&sl, c.batch * 4u) || !b.alloc(&tk, topk_bytes)) {
    std::printf("decode_step: allocation failed\n");
    return false;
  }
  fill<<<1024, 256>>>(kv, kv_elems, 1, false);
  fill<<<1024, 256>>>(icache, static_cast<size_t>(pool) * kBlock * kDim, 2, false);
  fill<<<64, 256>>>(iq, static_cast<size_t>(T) * kDim, 3, false);
  fill<<<64, 256>>>(q, static_cast<size_t>(T) * kQHeads * kDim, 4, false);
  std::vector<int32_t> table, lens;
  batch_metadata(c, pool, &table, &lens);
  AB_CHECK(cudaMemcpy(bt, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(sl, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  const msa::Device dev = msa::Device::cuda(0);
  msa::KvCacheView cache;
  msa::Status st = packed_cache(kv, msa::DType::kBF16, pool, nullptr, dev, &cache);
  if (!st.ok()) {
    std::printf("decode_step: cache: %s\n", st.message().c_str());
    return false;
  }
  const msa::TensorView block_table = msa::make_tensor(bt, msa::DType::kI32, {c.batch, nb}, dev);
  const msa::TensorView seq_lens = msa::make_tensor(sl, msa::DType::kI32, {c.batch}, dev);
  msa::SparseDecodeStepArgs a;
  a.index.query_len = c.qlen;
  a.index.index_q = msa::make_tensor(iq, msa::DType::kBF16, {T, 1, kDim}, dev);
  a.index.index_cache = msa::make_tensor(icache, msa::DType::kBF16, {pool, kBlock, kDim}, dev);
  a.index.block_table = block_table;
  a.index.seq_lens = seq_lens;
  a.index.topk_out = msa::make_tensor(tk, msa::DType::kI32, {1, T, kTopk}, dev);
  a.attention.query_len = c.qlen;
  a.attention.q = msa::make_tensor(q, msa::DType::kBF16, {T, kQHeads, kDim}, dev);
  a.attention.kv_cache = cache;
  a.attention.block_table = block_table;
  a.attention.seq_lens = seq_lens;
  a.attention.topk = a.index.topk_out;
  a.attention.out = msa::make_tensor(out, msa::DType::kBF16, {T, kQHeads, kDim}, dev);
  std::function<bool()> op;
  if (!bind_op("decode_step", a, b, s, &op)) return false;
  auto hash = [&](uint64_t* h) { return hash_device({{out, rows_bytes}, {tk, topk_bytes}}, h); };
  if (warm == nullptr && warm_code_mode()) {
    const std::function<bool()> warm_op = op;  // captured after each setenv below: same path
    return run_decode_step(c, s, fl, &warm_op);
  }
  // The caller's setting is restored afterwards.
  const char* prior = std::getenv("MSA_CUDA_DECODE_STEP");
  const std::string saved = prior != nullptr ? prior : "";
  bool ok = true;
  for (const char* path : {"chain", "persistent"}) {
    setenv("MSA_CUDA_DECODE_STEP", path, 1);
    // Cleared outputs, so that each path's hash is of what it wrote.
    ok = cudaMemset(out, 0, rows_bytes) == cudaSuccess &&
         cudaMemset(tk, 0xff, topk_bytes) == cudaSuccess &&
         time_op((std::string("decode_step_") + path).c_str(), c, s, fl, op, hash, warm);
    if (!ok) break;
  }
  if (prior != nullptr) {
    setenv("MSA_CUDA_DECODE_STEP", saved.c_str(), 1);
  } else {
    unsetenv("MSA_CUDA_DECODE_STEP");
  }
  return ok;
}

// One prompt of c.ctx tokens (no prefix) through prefill attention: dense (layers 0-2) or sparse
// over a synthetic top-k: the own block and up to 15 other visible blocks at random (neighbouring
// tokens share few blocks, the sparse kernel's worst case), or with MSA_AB_TOPK=shared drawn
// from a pool of 24 blocks common to each window of 16 tokens (neighbours share most of their
// blocks, as a trained indexer's do). fp8: e4m3 K/V with per-layer scales.
bool run_prefill(const Case& c, bool sparse, cudaStream_t s, const Flush& fl) {
  const int nb = c.ctx / kBlock, T = c.ctx, pool = nb + 8;
  const size_t es = c.fp8 ? 1 : 2;
  const size_t kv_elems = static_cast<size_t>(pool) * kBlock * 2 * kDim;
  const msa::DType cd = c.fp8 ? msa::DType::kE4M3 : msa::DType::kBF16;
  Buffers b;
  void *kv, *q, *out;
  float* scales;
  int32_t *bt, *sl, *cu, *tk = nullptr;
  const size_t rows_bytes = static_cast<size_t>(T) * kQHeads * kDim * 2;
  if (!b.alloc(&kv, kv_elems * es) || !b.alloc(&q, rows_bytes) || !b.alloc(&out, rows_bytes) ||
      !b.alloc(&scales, 2 * 4) || !b.alloc(&bt, static_cast<size_t>(nb) * 4) || !b.alloc(&sl, 4) ||
      !b.alloc(&cu, 2 * 4) || (sparse && !b.alloc(&tk, static_cast<size_t>(T) * kTopk * 4))) {
    std::printf("prefill: allocation failed\n");
    return false;
  }
  fill<<<1024, 256>>>(kv, kv_elems, 1, c.fp8);
  fill<<<1024, 256>>>(q, static_cast<size_t>(T) * kQHeads * kDim, 3, false);
  fill_f32<<<1, 32>>>(scales, 2, 0.0625f);
  std::vector<int32_t> table, lens;
  batch_metadata(c, pool, &table, &lens);
  const int32_t cu_host[2] = {0, T};
  AB_CHECK(cudaMemcpy(bt, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(sl, lens.data(), 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(cu, cu_host, sizeof(cu_host), cudaMemcpyHostToDevice));
  if (sparse) {
    std::vector<int32_t> ids(static_cast<size_t>(T) * kTopk, -1);
    std::mt19937 rng(13);
    const char* topk_env = std::getenv("MSA_AB_TOPK");
    const bool shared = topk_env != nullptr && std::string(topk_env) == "shared";
    constexpr int kWindow = 16, kWindowBlocks = 24;
    std::vector<int32_t> window_blocks;  // the current window's shared blocks
    for (int t = 0; t < T; ++t) {
      const int own = t / kBlock;
      std::vector<int32_t> pick{own};
      if (shared) {
        if (t % kWindow == 0) {  // blocks visible to all of the window's tokens
          window_blocks.clear();
          for (int j = 0; j < t / kBlock; ++j) window_blocks.push_back(j);
          std::shuffle(window_blocks.begin(), window_blocks.end(), rng);
          window_blocks.resize(std::min<size_t>(window_blocks.size(), kWindowBlocks));
        }
        pick.insert(pick.end(), window_blocks.begin(), window_blocks.end());
      } else {
        for (int j = 0; j < own; ++j) pick.push_back(j);
      }
      std::shuffle(pick.begin() + 1, pick.end(), rng);
      pick.resize(std::min<size_t>(pick.size(), kTopk));
      std::sort(pick.begin(), pick.end());
      std::copy(pick.begin(), pick.end(), ids.begin() + static_cast<int64_t>(t) * kTopk);
    }
    AB_CHECK(cudaMemcpy(tk, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  }
  const msa::Device dev = msa::Device::cuda(0);
  msa::KvCacheView cache;
  msa::Status st = packed_cache(kv, cd, pool, c.fp8 ? scales : nullptr, dev, &cache);
  if (!st.ok()) {
    std::printf("prefill: cache: %s\n", st.message().c_str());
    return false;
  }
  const msa::TensorView qv = msa::make_tensor(q, msa::DType::kBF16, {T, kQHeads, kDim}, dev);
  const msa::TensorView ov = msa::make_tensor(out, msa::DType::kBF16, {T, kQHeads, kDim}, dev);
  const msa::TensorView btv = msa::make_tensor(bt, msa::DType::kI32, {1, nb}, dev);
  const msa::TensorView slv = msa::make_tensor(sl, msa::DType::kI32, {1}, dev);
  const msa::TensorView cuv = msa::make_tensor(cu, msa::DType::kI32, {2}, dev);
  msa::DenseAttentionArgs dense;
  dense.q = qv;
  dense.kv_cache = cache;
  dense.block_table = btv;
  dense.cu_seqlens_q = cuv;
  dense.seq_lens = slv;
  dense.out = ov;
  msa::SparseAttentionPrefillArgs sp;
  sp.q = qv;
  sp.kv_cache = cache;
  sp.block_table = btv;
  sp.cu_seqlens_q = cuv;
  sp.seq_lens = slv;
  if (sparse) sp.topk = msa::make_tensor(tk, msa::DType::kI32, {1, T, kTopk}, dev);
  sp.out = ov;
  const char* name = sparse ? "sparse_prefill" : "dense_prefill";
  std::function<bool()> op;
  if (!(sparse ? bind_op(name, sp, b, s, &op) : bind_op(name, dense, b, s, &op))) return false;
  auto hash = [&](uint64_t* h) { return hash_device({{out, rows_bytes}}, h); };
  return time_op(name, c, s, fl, op, hash, nullptr);
}

// One prompt of c.ctx tokens (no prefix) through the prefill index top-k (scores + select) over
// random index keys; bf16, or e4m3 index_q and keys.
bool run_index_prefill(const Case& c, cudaStream_t s, const Flush& fl) {
  const int nb = c.ctx / kBlock, T = c.ctx, pool = nb + 8;
  const size_t es = c.fp8 ? 1 : 2;
  const size_t key_elems = static_cast<size_t>(pool) * kBlock * kDim;
  const msa::DType cd = c.fp8 ? msa::DType::kE4M3 : msa::DType::kBF16;
  Buffers b;
  void *keys, *iq;
  int32_t *bt, *sl, *cu, *tk;
  const size_t topk_bytes = static_cast<size_t>(T) * kTopk * 4;
  if (!b.alloc(&keys, key_elems * es) || !b.alloc(&iq, static_cast<size_t>(T) * kDim * es) ||
      !b.alloc(&bt, static_cast<size_t>(nb) * 4) || !b.alloc(&sl, 4) || !b.alloc(&cu, 2 * 4) ||
      !b.alloc(&tk, topk_bytes)) {
    std::printf("index_prefill: allocation failed\n");
    return false;
  }
  fill<<<1024, 256>>>(keys, key_elems, 5, c.fp8);
  fill<<<1024, 256>>>(iq, static_cast<size_t>(T) * kDim, 7, c.fp8);
  std::vector<int32_t> table, lens;
  batch_metadata(c, pool, &table, &lens);
  const int32_t cu_host[2] = {0, T};
  AB_CHECK(cudaMemcpy(bt, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(sl, lens.data(), 4, cudaMemcpyHostToDevice));
  AB_CHECK(cudaMemcpy(cu, cu_host, sizeof(cu_host), cudaMemcpyHostToDevice));
  const msa::Device dev = msa::Device::cuda(0);
  msa::IndexTopkPrefillArgs a;
  a.index_q = msa::make_tensor(iq, cd, {T, 1, kDim}, dev);
  a.index_cache = msa::make_tensor(keys, cd, {pool, kBlock, kDim}, dev);
  a.block_table = msa::make_tensor(bt, msa::DType::kI32, {1, nb}, dev);
  a.cu_seqlens_q = msa::make_tensor(cu, msa::DType::kI32, {2}, dev);
  a.seq_lens = msa::make_tensor(sl, msa::DType::kI32, {1}, dev);
  a.topk_out = msa::make_tensor(tk, msa::DType::kI32, {1, T, kTopk}, dev);
  std::function<bool()> op;
  if (!bind_op("index_prefill", a, b, s, &op)) return false;
  auto hash = [&](uint64_t* h) { return hash_device({{tk, topk_bytes}}, h); };
  return time_op("index_prefill", c, s, fl, op, hash, nullptr);
}

// Prefill cases: one prompt of 4K-64K tokens (the query length is the prompt), both dtypes.
std::vector<Case> prefill_cases() {
  std::vector<Case> cases;
  for (bool fp8 : {false, true}) {
    for (int ctx : {4096, 16384, 65536}) cases.push_back({ctx, 1, ctx, fp8, false});
  }
  return cases;
}

// The prefill index op also at 128K (its select runs 32 keys per lane there).
std::vector<Case> index_prefill_cases() {
  std::vector<Case> cases = prefill_cases();
  for (bool fp8 : {false, true}) cases.push_back({131072, 1, 131072, fp8, false});
  return cases;
}

// Index cases: batch 1-64 over 8K-512K, uniform and (where lengths can differ) ragged, both
// dtypes, and 32K x 4 with 4 rows per request. Attention cases: its work does not grow with the
// context, so 8K and 128K, with 1 and 4 rows per request.
std::vector<Case> index_cases() {
  std::vector<Case> cases;
  for (bool fp8 : {false, true}) {
    for (const auto& [ctx, batch] : std::vector<std::pair<int, int>>{{8192, 1},
                                                                     {8192, 4},
                                                                     {8192, 16},
                                                                     {8192, 64},
                                                                     {32768, 1},
                                                                     {32768, 4},
                                                                     {32768, 16},
                                                                     {32768, 64},
                                                                     {131072, 1},
                                                                     {131072, 4},
                                                                     {131072, 16},
                                                                     {131072, 64},
                                                                     {524288, 1},
                                                                     {524288, 4},
                                                                     {524288, 16}}) {
      cases.push_back({ctx, batch, 1, fp8, false});
    }
    for (const auto& [ctx, batch] : std::vector<std::pair<int, int>>{
             {32768, 64}, {131072, 16}, {131072, 64}, {524288, 4}, {524288, 16}}) {
      cases.push_back({ctx, batch, 1, fp8, true});
    }
    // Four rows per request (speculative decode) on a one-wave static grid: 32K x 4 with e4m3
    // keys took 21.8 -> 23.1 us between two full benchmark runs (2026-11-30-1017361-gpu-check.md).
    cases.push_back({32768, 4, 4, fp8, false});
    cases.push_back({32768, 4, 4, fp8, true});
  }
  return cases;
}

// index-shapes: e4m3 keys at the scorer instances the default cases do not reach (head dim 64,
// bf16 queries, both), on static grids of short (8K x 4) and long CTAs (8K x 64, 128K x 4), and on
// balanced grids (32K x 64, 128K x 16, 128K x 64, ragged 128K x 64); bf16 keys at head dims 192
// and 256.
std::vector<Case> index_shape_cases() {
  std::vector<Case> cases;
  for (const auto& [dim, q_bf16] :
       std::vector<std::pair<int, bool>>{{64, false}, {128, true}, {64, true}}) {
    for (const auto& [ctx, batch, ragged] :
         std::vector<std::tuple<int, int, bool>>{{8192, 4, false},
                                                 {8192, 64, false},
                                                 {131072, 4, false},
                                                 {32768, 64, false},
                                                 {131072, 16, false},
                                                 {131072, 64, false},
                                                 {131072, 64, true}}) {
      Case c{ctx, batch, 1, true, ragged};
      c.dim = dim;
      c.q_bf16 = q_bf16;
      cases.push_back(c);
    }
  }
  // bf16 keys at the wide head dims, on static grids of short and long CTAs.
  for (int dim : {192, 256}) {
    for (const auto& [ctx, batch] :
         std::vector<std::pair<int, int>>{{8192, 4}, {8192, 64}, {131072, 4}, {131072, 16}}) {
      Case c{ctx, batch, 1, false, false};
      c.dim = dim;
      cases.push_back(c);
    }
  }
  return cases;
}

std::vector<Case> step_cases() {
  std::vector<Case> cases;
  for (bool fp8 : {false, true}) {
    for (const auto& [ctx, batch] : std::vector<std::pair<int, int>>{{8192, 1},
                                                                     {8192, 16},
                                                                     {8192, 64},
                                                                     {32768, 1},
                                                                     {32768, 16},
                                                                     {131072, 1},
                                                                     {131072, 16},
                                                                     {131072, 64}}) {
      cases.push_back({ctx, batch, 1, fp8, false});
    }
    cases.push_back({8192, 16, 4, fp8, false});
    cases.push_back({131072, 1, 1, fp8, true});
    cases.push_back({131072, 64, 1, fp8, true});
  }
  return cases;
}

// decode-step: batch 1-16 (the batches the persistent kernel takes by default at top-16) over
// 8K-128K, one row per request, bf16.
std::vector<Case> decode_step_cases() {
  std::vector<Case> cases;
  for (int ctx : {8192, 32768, 131072}) {
    for (int batch : {1, 4, 16}) cases.push_back({ctx, batch, 1, false, false});
  }
  return cases;
}

std::vector<Case> attention_cases() {
  std::vector<Case> cases;
  for (bool fp8 : {false, true}) {
    for (int ctx : {8192, 131072}) {
      for (int batch : {1, 4, 16, 64}) {
        for (int qlen : {1, 4}) cases.push_back({ctx, batch, qlen, fp8, false});
      }
    }
  }
  cases.push_back({131072, 64, 1, false, true});
  return cases;
}

// attention-layer: the fp8 attention cases with a per-layer scale.
std::vector<Case> attention_layer_cases() {
  std::vector<Case> cases;
  for (Case c : attention_cases()) {
    if (!c.fp8) continue;
    c.layer_scale = true;
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  // OPS: "all" or a comma-separated list of known ops; anything else is a usage error.
  bool index = false, attention = false, step = false, shapes = false, layer = false;
  bool dense_prefill = false, sparse_prefill = false, index_prefill = false, decode_step = false;
  bool ops_ok = argc == 1 || argc == 2 || argc == 5;
  std::string ops = argc > 1 ? argv[1] : "all";
  for (size_t begin = 0; ops_ok && begin <= ops.size();) {
    const size_t end = std::min(ops.find(',', begin), ops.size());
    const std::string op = ops.substr(begin, end - begin);
    if (op == "all") {
      index = attention = step = true;
    } else if (op == "index") {
      index = true;
    } else if (op == "attention") {
      attention = true;
    } else if (op == "step") {
      step = true;
    } else if (op == "index-shapes") {
      shapes = true;
    } else if (op == "attention-layer") {
      layer = true;
    } else if (op == "dense-prefill") {
      dense_prefill = true;
    } else if (op == "sparse-prefill") {
      sparse_prefill = true;
    } else if (op == "index-prefill") {
      index_prefill = true;
    } else if (op == "decode-step") {
      decode_step = true;
    } else {
      ops_ok = false;
    }
    begin = end + 1;
  }
  const bool filtered = argc == 5;
  const int f_ctx = filtered ? std::atoi(argv[2]) : 0;
  const int f_batch = filtered ? std::atoi(argv[3]) : 0;
  const int f_qlen = filtered ? std::atoi(argv[4]) : 0;
  // MSA_AB_DTYPE=bf16 or fp8 keeps only that dtype's cases (e.g. to profile an fp8 case alone).
  const char* dtype_env = std::getenv("MSA_AB_DTYPE");
  const std::string only_dtype = dtype_env != nullptr ? dtype_env : "";
  if (!only_dtype.empty() && only_dtype != "bf16" && only_dtype != "fp8") ops_ok = false;
  auto selected = [&](const Case& c) {
    if (!only_dtype.empty() && c.fp8 != (only_dtype == "fp8")) return false;
    return !filtered || (c.ctx == f_ctx && c.batch == f_batch && c.qlen == f_qlen);
  };
  int matching = 0;
  for (const auto& [wanted, cases] :
       {std::make_pair(index, index_cases()), std::make_pair(shapes, index_shape_cases()),
        std::make_pair(attention, attention_cases()),
        std::make_pair(layer, attention_layer_cases()), std::make_pair(step, step_cases()),
        std::make_pair(decode_step, decode_step_cases()),
        std::make_pair(dense_prefill || sparse_prefill, prefill_cases()),
        std::make_pair(index_prefill, index_prefill_cases())}) {
    if (wanted) matching += static_cast<int>(std::count_if(cases.begin(), cases.end(), selected));
  }
  if (!ops_ok || matching == 0) {
    std::printf(
        "usage: op_ab [all|index,index-shapes,attention,attention-layer,step,dense-prefill,"
        "sparse-prefill,index-prefill,decode-step]"
        " [CTX BATCH QLEN] (environment: MSA_AB_DTYPE=bf16|fp8, MSA_AB_TOPK=shared)%s\n",
        ops_ok ? " (no case of these ops has that shape)" : "");
    return 2;
  }
  Flush fl;
  fl.n = (size_t{256} << 20) / sizeof(uint4);
  cudaStream_t s;
  if (cudaMalloc(&fl.buf, fl.n * sizeof(uint4)) != cudaSuccess ||
      cudaMalloc(&fl.sink, sizeof(unsigned)) != cudaSuccess ||
      cudaMemset(fl.buf, 1, fl.n * sizeof(uint4)) != cudaSuccess ||
      cudaStreamCreate(&s) != cudaSuccess) {
    std::printf("setup failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  if (index) {
    for (const Case& c : index_cases()) {
      if (selected(c) && !run_index(c, s, fl)) return 1;
    }
  }
  if (shapes) {
    for (const Case& c : index_shape_cases()) {
      if (selected(c) && !run_index(c, s, fl)) return 1;
    }
  }
  if (attention) {
    for (const Case& c : attention_cases()) {
      if (selected(c) && !run_attention(c, s, fl)) return 1;
    }
  }
  if (layer) {
    for (const Case& c : attention_layer_cases()) {
      if (selected(c) && !run_attention(c, s, fl)) return 1;
    }
  }
  if (step) {
    for (const Case& c : step_cases()) {
      if (selected(c) && !run_step(c, s, fl)) return 1;
    }
  }
  if (decode_step) {
    for (const Case& c : decode_step_cases()) {
      if (selected(c) && !run_decode_step(c, s, fl)) return 1;
    }
  }
  for (const auto& [wanted, sparse] :
       {std::make_pair(dense_prefill, false), std::make_pair(sparse_prefill, true)}) {
    if (!wanted) continue;
    for (const Case& c : prefill_cases()) {
      if (selected(c) && !run_prefill(c, sparse, s, fl)) return 1;
    }
  }
  if (index_prefill) {
    for (const Case& c : index_prefill_cases()) {
      if (selected(c) && !run_index_prefill(c, s, fl)) return 1;
    }
  }
  return 0;
}
