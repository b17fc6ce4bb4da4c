// libFuzzer harness over every op's check() and the CPU backend's run() (issue 39, item 13).
//
// An input drives one call: a first byte picks the op, the next bytes pick a small valid
// geometry (all-zero bytes give a valid call), then a list of mutations garbles the views
// (rank, shape, strides, dtype, device, presence) and the host scalars, and the tensor contents
// are drawn from the rest of the input, mostly in the range a valid call needs. Every tensor
// gets its own buffer of exactly the bytes its view spans, between guard bytes that are
// checked afterwards (and poisoned under AddressSanitizer, so that reads are caught too).
//
// Invariants, besides "no crash and no sanitizer report":
// - run() after a failing check() returns the same code and changes nothing;
// - no byte changes outside the elements of the op's outputs (in-place tensors included);
// - kOutOfRange changes nothing but error_flags, which gains a bit (docs/api.md); any other
//   failure changes nothing at all; a success leaves error_flags as it was;
// - a success gives the same bytes with another thread count.
// Calls whose problems are too big to run quickly (stride-0 views of huge shapes that check()
// accepts, workspaces past 16 MiB) are only checked, not run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "msa/attention.h"
#include "msa/cache.h"
#include "msa/decode_step.h"
#include "msa/fused_qknorm_rope.h"
#include "msa/indexer.h"
#include "msa/metadata.h"
#include "msa/tensor.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MSA_FUZZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MSA_FUZZ_ASAN 1
#endif
#if defined(MSA_FUZZ_ASAN)
#include <sanitizer/asan_interface.h>
#define MSA_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define MSA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define MSA_POISON(p, n) ((void)(p), (void)(n))
#define MSA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace msa {
namespace fuzz {
namespace {

constexpr int64_t kGuard = 256;                   // guard bytes on each side of a buffer
constexpr int64_t kMaxTensorBytes = 1 << 20;      // larger views are not backed by memory
constexpr int64_t kMaxRunElements = 1 << 16;      // larger views are checked, not run
constexpr int64_t kMaxWorkspaceBytes = 16 << 20;  // larger workspaces: checked, not run
constexpr uint8_t kGuardByte = 0xA5;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_ops invariant violated: %s\n", what.c_str());
  std::abort();
}

// The fuzz input, read front to back; past its end every read gives 0, so that a short input
// means "defaults" (a valid call, no mutation).
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | byte();
    return v;
  }
  // One of `options`; byte 0 picks the first.
  template <typename T>
  T pick(std::initializer_list<T> options) {
    const size_t i = byte() % options.size();
    return *(options.begin() + i);
  }
  // A value in [lo, hi] (hi - lo < 2^32).
  int64_t range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(u32() % static_cast<uint64_t>(hi - lo + 1));
  }
  // True with probability 1/n (false past the end).
  bool rare(int n) { return byte() % n == static_cast<uint8_t>(n - 1); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// What a tensor's elements plausibly hold, so that most calls pass the value checks.
enum class Role { kData, kPage, kSeqLen, kTopk, kCu, kCount, kPosition, kSlot, kFlags, kScale };

struct Field {
  std::string name;
  TensorView* view;
  bool present;   // given (data non-null) in the call
  bool writable;  // an output or modified in place
  Role role;
  int64_t lo = 0, hi = 0;  // plausible values of integer roles
};

struct IntScalar {
  std::string name;
  std::function<void(int64_t)> set;
};
struct FloatScalar {
  std::string name;
  std::function<void(double)> set;
};

// The tensors and scalars of one call, and how to check, size and run it.
struct Call {
  std::vector<Field> fields;
  std::vector<IntScalar> ints;
  std::vector<FloatScalar> floats;
  std::function<Status()> check;
  std::function<Status(size_t*)> workspace_size;
  std::function<Status(Workspace, Stream)> run;
  // Views that an op's arguments must share (the decode step's halves), copied from the fields
  // that own them once the buffers exist; `in` may break one link on purpose.
  std::function<void(Input&)> link;

  void add(const std::string& name, TensorView* v, bool present, bool writable, Role role,
           int64_t lo = 0, int64_t hi = 0) {
    fields.push_back({name, v, present, writable, role, lo, hi});
  }
};

template <typename Args>
void bind(Call* c, Args* a) {
  c->check = [a] { return msa::check(*a); };
  c->workspace_size = [a](size_t* bytes) { return msa::workspace_size(*a, bytes); };
  c->run = [a](Workspace ws, Stream s) { return msa::run(*a, ws, s); };
}

// A contiguous view (data set later) of a shape with at most kMaxDims entries.
TensorView view(DType dtype, std::initializer_list<int64_t> shape) {
  return make_tensor(nullptr, dtype, shape);
}

// ---- geometries: each reads a few bytes and builds a valid call ----------------------------

struct Geometry {
  int64_t requests, query_len, kv_heads, group, head_dim, block_size, max_blocks, num_blocks, topk,
      rows;
  DType q_dtype, out_dtype, cache_dtype;
  KvScaleMode scale_mode;
};

Geometry read_geometry(Input& in, bool page16_block) {
  Geometry g;
  g.requests = in.pick<int64_t>({2, 1, 3, 0, 4});
  g.query_len = in.pick<int64_t>({1, 2, 3, 4, 8});
  g.kv_heads = in.pick<int64_t>({1, 2});
  g.group = in.pick<int64_t>({2, 1, 4, 3});
  g.head_dim = in.pick<int64_t>({16, 8, 32, 64, 12});
  g.block_size =
      page16_block ? in.pick<int64_t>({16, 32, 128}) : in.pick<int64_t>({16, 8, 32, 128, 5});
  g.max_blocks = in.pick<int64_t>({3, 1, 2, 4});
  g.num_blocks = in.pick<int64_t>({8, 4, 12, 1});
  g.topk = in.pick<int64_t>({4, 1, 2, 8});
  g.rows = in.pick<int64_t>({4, 1, 8, 0, 6});  // prefill-form rows
  g.q_dtype = in.pick({DType::kBF16, DType::kF16, DType::kF32});
  g.out_dtype = in.pick({DType::kF32, g.q_dtype});
  g.cache_dtype = in.pick({DType::kBF16, DType::kF16, DType::kE4M3});
  g.scale_mode =
      g.cache_dtype == DType::kE4M3
          ? in.pick({KvScaleMode::kNone, KvScaleMode::kPerLayer, KvScaleMode::kPerTokenHead})
          : KvScaleMode::kNone;
  return g;
}

void add_kv_cache(Call* c, KvCacheView* kv, const Geometry& g) {
  kv->k = view(g.cache_dtype, {g.num_blocks, g.kv_heads, g.block_size, g.head_dim});
  kv->v = kv->k;
  kv->scale_mode = g.scale_mode;
  const bool layer = g.scale_mode == KvScaleMode::kPerLayer;
  kv->k_scale =
      layer ? view(DType::kF32, {1}) : view(DType::kF32, {g.kv_heads, g.num_blocks * g.block_size});
  kv->v_scale = kv->k_scale;
  const bool scaled = g.scale_mode != KvScaleMode::kNone;
  c->add("kv_cache.k", &kv->k, true, false, Role::kData);
  c->add("kv_cache.v", &kv->v, true, false, Role::kData);
  c->add("kv_cache.k_scale", &kv->k_scale, scaled, false, Role::kScale);
  c->add("kv_cache.v_scale", &kv->v_scale, scaled, false, Role::kScale);
  c->ints.push_back({"kv_cache.scale_mode", [kv](int64_t v) {
                       kv->scale_mode = static_cast<KvScaleMode>(static_cast<int32_t>(v));
                     }});
}

// Every op's Args lives here for the duration of one input.
struct AllArgs {
  SparsePage16Args page16;
  IndexTopkDecodeArgs index_decode;
  IndexTopkPrefillArgs index_prefill;
  SparseAttentionDecodeArgs attn_decode;
  SparseAttentionPrefillArgs attn_prefill;
  DenseAttentionArgs dense;
  BatchMetadataArgs metadata;
  FusedQkNormRopeArgs fused;
  RopeCacheArgs rope;
  SparseDecodeStepArgs step;
};

void build_page16(Input& in, AllArgs& all, Call* c) {
  const Geometry g = read_geometry(in, true);
  SparsePage16Args& a = all.page16;
  a.query_len = static_cast<int>(g.query_len);
  a.block_size = static_cast<int>(g.block_size);
  a.page_stride = g.block_size / 16 <= 8 ? in.pick({8, 16}) : 16;
  const int64_t T = g.requests * g.query_len;
  a.topk = view(DType::kI32, {g.kv_heads, T, g.topk});
  a.block_table = view(DType::kI32, {g.requests, g.max_blocks});
  a.seq_lens = view(DType::kI32, {g.requests});
  a.table_out = view(DType::kI32, {T * g.kv_heads, g.topk * g.block_size / 16});
  a.context_lens_out = view(DType::kI32, {T * g.kv_heads});
  a.error_flags = view(DType::kI32, {1});
  c->add("topk", &a.topk, true, false, Role::kTopk, -1, g.max_blocks - 1);
  c->add("block_table", &a.block_table, true, false, Role::kPage, 0, g.num_blocks - 1);
  c->add("seq_lens", &a.seq_lens, true, false, Role::kSeqLen, 0, g.max_blocks * g.block_size);
  c->add("table_out", &a.table_out, true, true, Role::kData);
  c->add("context_lens_out", &a.context_lens_out, true, true, Role::kData);
  c->add("error_flags", &a.error_flags, !in.rare(4), true, Role::kFlags);
  c->ints.push_back({"query_len", [&a](int64_t v) { a.query_len = static_cast<int>(v); }});
  c->ints.push_back({"page_stride", [&a](int64_t v) { a.page_stride = static_cast<int>(v); }});
  c->ints.push_back({"block_size", [&a](int64_t v) { a.block_size = static_cast<int>(v); }});
  bind(c, &a);
}

// The fields shared by both index top-k forms.
template <typename Args>
void add_index_common(Input& in, Args& a, Call* c, const Geometry& g, int64_t T) {
  const int64_t heads = g.kv_heads;
  const DType dt = in.pick({DType::kBF16, DType::kE4M3});
  a.params.topk = static_cast<int>(g.topk);
  a.params.init_blocks = in.pick({0, 1});
  a.params.local_blocks = in.pick({1, 0, 2});
  a.index_q = view(dt, {T, heads, g.head_dim});
  a.index_cache =
      view(in.pick({DType::kBF16, DType::kE4M3}), {g.num_blocks, g.block_size, g.head_dim});
  a.block_table = view(DType::kI32, {g.requests, g.max_blocks});
  a.seq_lens = view(DType::kI32, {g.requests});
  a.topk_out = view(DType::kI32, {heads, T + in.pick<int64_t>({0, 2}), g.topk});
  a.error_flags = view(DType::kI32, {1});
  c->add("index_q", &a.index_q, true, false, Role::kData);
  c->add("index_cache", &a.index_cache, true, false, Role::kData);
  c->add("block_table", &a.block_table, true, false, Role::kPage, 0, g.num_blocks - 1);
  c->add("seq_lens", &a.seq_lens, true, false, Role::kSeqLen, 0, g.max_blocks * g.block_size);
  c->add("topk_out", &a.topk_out, true, true, Role::kData);
  c->add("error_flags", &a.error_flags, !in.rare(4), true, Role::kFlags);
  c->ints.push_back({"params.topk", [&a](int64_t v) { a.params.topk = static_cast<int>(v); }});
  c->ints.push_back(
      {"params.init_blocks", [&a](int64_t v) { a.params.init_blocks = static_cast<int>(v); }});
  c->ints.push_back(
      {"params.local_blocks", [&a](int64_t v) { a.params.local_blocks = static_cast<int>(v); }});
}

void build_index_decode(Input& in, AllArgs& all, Call* c) {
  const Geometry g = read_geometry(in, false);
  IndexTopkDecodeArgs& a = all.index_decode;
  a.query_len = static_cast<int>(g.query_len);
  add_index_common(in, a, c, g, g.requests * g.query_len);
  c->ints.push_back({"query_len", [&a](int64_t v) { a.query_len = static_cast<int>(v); }});
  bind(c, &a);
}

void build_index_prefill(Input& in, AllArgs& all, Call* c) {
  const Geometry g = read_geometry(in, false);
  IndexTopkPrefillArgs& a = all.index_prefill;
  add_index_common(in, a, c, g, g.rows);
  a.cu_seqlens_q = view(DType::kI32, {g.requests + 1});
  c->add("cu_seqlens_q", &a.cu_seqlens_q, true, false, Role::kCu, 0, g.rows);
  bind(c, &a);
}

// The fields shared by the three attention forms.
// `own_batch` false leaves seq_lens and error_flags to Call::link (the decode step's attention
// half shares its index half's).
template <typename Args>
void add_attention_common(Input& in, Args& a, Call* c, const Geometry& g, int64_t T,
                          bool own_batch = true) {
  a.softmax_scale = in.pick({0.0f, 0.125f});
  a.q = view(g.q_dtype, {T, g.kv_heads * g.group, g.head_dim});
  add_kv_cache(c, &a.kv_cache, g);
  a.block_table = view(DType::kI32, {g.requests, g.max_blocks});
  a.seq_lens = view(DType::kI32, {g.requests});
  a.out = view(g.out_dtype, {T, g.kv_heads * g.group, g.head_dim});
  a.lse = view(DType::kF32, {T, g.kv_heads * g.group});
  a.error_flags = view(DType::kI32, {1});
  c->add("q", &a.q, true, false, Role::kData);
  c->add("block_table", &a.block_table, true, false, Role::kPage, 0, g.num_blocks - 1);
  if (own_batch) {
    c->add("seq_lens", &a.seq_lens, true, false, Role::kSeqLen, 0, g.max_blocks * g.block_size);
  }
  c->add("out", &a.out, true, true, Role::kData);
  c->add("lse", &a.lse, !in.rare(3), true, Role::kData);
  if (own_batch) c->add("error_flags", &a.error_flags, !in.rare(4), true, Role::kFlags);
  c->floats.push_back(
      {"softmax_scale", [&a](double v) { a.softmax_scale = static_cast<float>(v); }});
}

void build_attn_decode(Input& in, AllArgs& all, Call* c) {
  const Geometry g = read_geometry(in, false);
  SparseAttentionDecodeArgs& a = all.attn_decode;
  const int64_t T = g.requests * g.query_len;
  a.query_len = static_cast<int>(g.query_len);
  add_attention_common(in, a, c, g, T);
  a.topk = view(DType::kI32, {g.kv_heads, T, g.topk});
  c->add("topk", &a.topk, true, false, Role::kTopk, -1, g.max_blocks - 1);
  c->ints.push_back({"query_len", [&a](int64_t v) { a.query_len = static_cast<int>(v); }});
  bind(c, &a);
}

// The decode step: an index half and an attention half over one batch. The attention half's
// top-k, seq_lens and error_flags are its index half's views (linked after mutation, so a
// garbled index view is garbled in both), except when the input breaks one link, which check()
// must reject.
void build_decode_step(Input& in, AllArgs& all, Call* c) {
  const Geometry g = read_geometry(in, false);
  SparseDecodeStepArgs& a = all.step;
  const int64_t T = g.requests * g.query_len;
  a.index.query_len = static_cast<int>(g.query_len);
  a.attention.query_len = static_cast<int>(g.query_len);
  add_index_common(in, a.index, c, g, T);
  add_attention_common(in, a.attention, c, g, T, false);
  c->ints.push_back(
      {"index.query_len", [&a](int64_t v) { a.index.query_len = static_cast<int>(v); }});
  c->ints.push_back(
      {"attention.query_len", [&a](int64_t v) { a.attention.query_len = static_cast<int>(v); }});
  c->link = [&a](Input& link_in) {
    a.attention.topk = a.index.topk_out;
    a.attention.seq_lens = a.index.seq_lens;
    a.attention.error_flags = a.index.error_flags;
    if (link_in.rare(8)) {
      TensorView* broken[] = {&a.attention.topk, &a.attention.seq_lens, &a.attention.error_flags};
      TensorView& v = *broken[link_in.byte() % 3];
      v.data = v.data == nullptr ? a.index.index_q.data : nullptr;
    }
  };
  bind(c, &a);
}

void build_attn_prefill(Input& in, AllArgs& all, Call* c) {
  const Geometry g = read_geometry(in, false);
  SparseAttentionPrefillArgs& a = all.attn_prefill;
  add_attention_common(in, a, c, g, g.rows);
  a.cu_seqlens_q = view(DType::kI32, {g.requests + 1});
  a.topk = view(DType::kI32, {g.kv_heads, g.rows, g.topk});
  c->add("cu_seqlens_q", &a.cu_seqlens_q, true, false, Role::kCu, 0, g.rows);
  c->add("topk", &a.topk, true, false, Role::kTopk, -1, g.max_blocks - 1);
  bind(c, &a);
}

void build_dense(Input& in, AllArgs& all, Call* c) {
  const Geometry g = read_geometry(in, false);
  DenseAttentionArgs& a = all.dense;
  add_attention_common(in, a, c, g, g.rows);
  a.cu_seqlens_q = view(DType::kI32, {g.requests + 1});
  c->add("cu_seqlens_q", &a.cu_seqlens_q, true, false, Role::kCu, 0, g.rows);
  bind(c, &a);
}

void build_metadata(Input& in, AllArgs& all, Call* c) {
  const int64_t batch = in.pick<int64_t>({3, 1, 0, 5});
  BatchMetadataArgs& a = all.metadata;
  a.num_decode_requests = static_cast<int>(in.range(0, batch));
  a.decode_query_len = in.pick({1, 2, 4, 8});
  a.block_size = in.pick({16, 1, 7, 128});
  const int64_t mb = in.pick<int64_t>({4, 1, 2});
  const int64_t cap = in.pick<int64_t>({16, 8, 0, 40});
  a.query_lens = view(DType::kI32, {batch});
  a.seq_lens = view(DType::kI32, {batch});
  a.block_table = view(DType::kI32, {batch, mb});
  a.index_block_table = view(DType::kI32, {batch, mb});
  a.query_start_loc = view(DType::kI32, {batch + 1});
  a.prefill_cu_seqlens_q = view(DType::kI32, {batch - a.num_decode_requests + 1});
  a.prefill_cu_seqlens_k = a.prefill_cu_seqlens_q;
  a.context_lens = view(DType::kI32, {batch});
  a.kv_block_counts = view(DType::kI32, {batch});
  a.token_request = view(DType::kI32, {cap});
  a.token_position = view(DType::kI32, {cap});
  a.slot_mapping = view(DType::kI64, {cap});
  a.index_slot_mapping = view(DType::kI64, {cap});
  a.totals = view(DType::kI32, {4});
  a.error_flags = view(DType::kI32, {1});
  const bool slots = !in.rare(3), index_slots = !in.rare(3);
  c->add("query_lens", &a.query_lens, true, false, Role::kCount, 0, a.decode_query_len);
  c->add("seq_lens", &a.seq_lens, true, false, Role::kSeqLen, 0, mb * a.block_size);
  c->add("block_table", &a.block_table, slots || in.rare(2), false, Role::kPage, 0, 50);
  c->add("index_block_table", &a.index_block_table, index_slots || in.rare(2), false, Role::kPage,
         0, 50);
  c->add("query_start_loc", &a.query_start_loc, !in.rare(3), true, Role::kData);
  c->add("prefill_cu_seqlens_q", &a.prefill_cu_seqlens_q, !in.rare(3), true, Role::kData);
  c->add("prefill_cu_seqlens_k", &a.prefill_cu_seqlens_k, !in.rare(3), true, Role::kData);
  c->add("context_lens", &a.context_lens, !in.rare(3), true, Role::kData);
  c->add("kv_block_counts", &a.kv_block_counts, !in.rare(3), true, Role::kData);
  c->add("token_request", &a.token_request, !in.rare(3), true, Role::kData);
  c->add("token_position", &a.token_position, !in.rare(3), true, Role::kData);
  c->add("slot_mapping", &a.slot_mapping, slots, true, Role::kData);
  c->add("index_slot_mapping", &a.index_slot_mapping, index_slots, true, Role::kData);
  c->add("totals", &a.totals, !in.rare(3), true, Role::kData);
  c->add("error_flags", &a.error_flags, !in.rare(4), true, Role::kFlags);
  c->ints.push_back(
      {"num_decode_requests", [&a](int64_t v) { a.num_decode_requests = static_cast<int>(v); }});
  c->ints.push_back(
      {"decode_query_len", [&a](int64_t v) { a.decode_query_len = static_cast<int>(v); }});
  c->ints.push_back({"block_size", [&a](int64_t v) { a.block_size = static_cast<int>(v); }});
  bind(c, &a);
}

void build_fused(Input& in, AllArgs& all, Call* c) {
  FusedQkNormRopeArgs& a = all.fused;
  a.mode =
      in.pick({PreAttentionMode::kSparse, PreAttentionMode::kDense, PreAttentionMode::kSkipIndex});
  const bool sparse = a.mode == PreAttentionMode::kSparse;
  const bool dense = a.mode == PreAttentionMode::kDense;
  const int64_t T = in.pick<int64_t>({3, 1, 4, 0});
  a.num_q_heads = in.pick({2, 1, 4});
  a.num_kv_heads = in.pick({1, 2});
  a.num_index_heads = dense ? in.pick({0, 1}) : in.pick({1, 2});
  const int64_t D = in.pick<int64_t>({16, 8, 32});
  const int64_t Di = sparse ? in.pick<int64_t>({D, 8, 16}) : D;
  a.rotary_dim = static_cast<int>(in.pick<int64_t>({D / 2, D, 2}));
  if (sparse && a.rotary_dim > Di) a.rotary_dim = static_cast<int>(Di);
  a.eps = in.pick({1e-6f, 1e-2f});
  const DType act = in.pick({DType::kBF16, DType::kF16});
  const int64_t max_pos = in.pick<int64_t>({16, 1, 64});
  const int64_t nb = in.pick<int64_t>({4, 1, 2});
  const int64_t bs = in.pick<int64_t>({16, 8, 4});
  int64_t width = (a.num_q_heads + 2 * a.num_kv_heads) * D;
  if (!dense || (a.num_index_heads > 0 && in.rare(2))) width += (a.num_index_heads + 1) * Di;
  a.qkv = view(act, {T, width});
  a.positions = view(in.pick({DType::kI64, DType::kI32}), {T});
  a.cos_sin_cache =
      view(in.pick({DType::kF32, DType::kBF16, DType::kF16}), {max_pos, a.rotary_dim});
  const DType wt = in.pick({DType::kF32, act});
  a.q_norm_weight = view(wt, {D});
  a.k_norm_weight = view(wt, {D});
  a.index_q_norm_weight = view(wt, {Di});
  a.index_k_norm_weight = view(wt, {Di});
  a.slot_mapping = view(in.pick({DType::kI64, DType::kI32}), {T});
  Geometry g{};
  g.num_blocks = nb;
  g.kv_heads = a.num_kv_heads;
  g.block_size = bs;
  g.head_dim = D;
  g.cache_dtype = in.pick({DType::kBF16, DType::kE4M3, DType::kF16});
  g.scale_mode =
      g.cache_dtype == DType::kE4M3
          ? in.pick({KvScaleMode::kPerLayer, KvScaleMode::kNone, KvScaleMode::kPerTokenHead})
          : KvScaleMode::kNone;
  add_kv_cache(c, &a.kv_cache, g);
  a.index_slot_mapping = view(DType::kI64, {T});
  a.index_cache = view(in.pick({DType::kBF16, DType::kE4M3}), {nb, bs, Di});
  a.q_out = view(act, {T, a.num_q_heads, D});
  a.index_q_out = view(in.pick({DType::kBF16, DType::kE4M3}), {T, a.num_index_heads, Di});
  a.error_flags = view(DType::kI32, {1});
  const bool kv = !in.rare(3);
  // add_kv_cache added the cache fields: K and V are written in place here.
  for (Field& f : c->fields) {
    if (f.name == "kv_cache.k" || f.name == "kv_cache.v") {
      f.writable = true;
      f.present = kv;
    }
  }
  c->add("qkv", &a.qkv, true, true, Role::kData);
  c->add("positions", &a.positions, true, false, Role::kPosition, -1, max_pos - 1);
  c->add("cos_sin_cache", &a.cos_sin_cache, true, false, Role::kData);
  c->add("q_norm_weight", &a.q_norm_weight, true, false, Role::kData);
  c->add("k_norm_weight", &a.k_norm_weight, true, false, Role::kData);
  c->add("index_q_norm_weight", &a.index_q_norm_weight, sparse, false, Role::kData);
  c->add("index_k_norm_weight", &a.index_k_norm_weight, sparse, false, Role::kData);
  c->add("slot_mapping", &a.slot_mapping, kv, false, Role::kSlot, -1, nb * bs - 1);
  c->add("index_slot_mapping", &a.index_slot_mapping, !dense && in.rare(2), false, Role::kSlot, -1,
         nb * bs - 1);
  c->add("index_cache", &a.index_cache, !dense && !in.rare(3), true, Role::kData);
  c->add("q_out", &a.q_out, in.rare(2), true, Role::kData);
  c->add("index_q_out", &a.index_q_out, sparse && in.rare(2), true, Role::kData);
  c->add("error_flags", &a.error_flags, !in.rare(4), true, Role::kFlags);
  c->ints.push_back({"mode", [&a](int64_t v) {
                       a.mode = static_cast<PreAttentionMode>(static_cast<int32_t>(v));
                     }});
  c->ints.push_back({"num_q_heads", [&a](int64_t v) { a.num_q_heads = static_cast<int>(v); }});
  c->ints.push_back({"num_kv_heads", [&a](int64_t v) { a.num_kv_heads = static_cast<int>(v); }});
  c->ints.push_back(
      {"num_index_heads", [&a](int64_t v) { a.num_index_heads = static_cast<int>(v); }});
  c->ints.push_back({"rotary_dim", [&a](int64_t v) { a.rotary_dim = static_cast<int>(v); }});
  c->floats.push_back({"eps", [&a](double v) { a.eps = static_cast<float>(v); }});
  bind(c, &a);
}

void build_rope(Input& in, AllArgs& all, Call* c) {
  RopeCacheArgs& a = all.rope;
  a.theta = in.pick({5e6, 1e4, 1.5});
  a.cos_sin_out =
      view(DType::kF32, {in.pick<int64_t>({16, 1, 0, 64}), in.pick<int64_t>({8, 2, 64, 3})});
  c->add("cos_sin_out", &a.cos_sin_out, true, true, Role::kData);
  c->floats.push_back({"theta", [&a](double v) { a.theta = v; }});
  bind(c, &a);
}

// The cache layout adapters and view helpers on a garbled view (they read no tensor data).
void exercise_views(Input& in, TensorView base) {
  static char storage[64];
  base.data = storage;
  const int d = in.byte() % 8 - 1;
  const int64_t i = in.range(-2, 300);
  (void)base.numel();
  (void)base.is_contiguous();
  (void)base.select(d, i).numel();
  (void)base.slice(d, i, in.range(-1, 8)).is_contiguous();
  (void)base.permute({in.byte() % 7 - 1, in.byte() % 7 - 1, in.byte() % 7 - 1}).numel();
  KvCacheView kv;
  (void)make_packed_kv_cache(base, &kv);
  (void)make_split_kv_cache(base, &kv);
  const TensorView scale = view(DType::kF32, {in.pick<int64_t>({1, 2})});
  (void)set_kv_scales(&kv, static_cast<KvScaleMode>(in.byte() % 4), scale, scale);
}

// ---- mutations -----------------------------------------------------------------------------

int64_t interesting_int(Input& in) {
  switch (in.byte() % 16) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return -1;
    case 3:
      return 2;
    case 4:
      return 3;
    case 5:
      return 7;
    case 6:
      return 8;
    case 7:
      return 9;
    case 8:
      return 16;
    case 9:
      return 17;
    case 10:
      return 128;
    case 11:
      return std::numeric_limits<int32_t>::max();
    case 12:
      return std::numeric_limits<int32_t>::min();
    case 13:
      return (int64_t{1} << 62) + 3;
    case 14:
      return std::numeric_limits<int64_t>::max();
    default:
      return in.range(-4, 300);
  }
}

double interesting_float(Input& in) {
  switch (in.byte() % 8) {
    case 0:
      return 0.0;
    case 1:
      return -1.0;
    case 2:
      return std::nan("");
    case 3:
      return std::numeric_limits<double>::infinity();
    case 4:
      return 1e-30;
    case 5:
      return 1e30;
    case 6:
      return -std::numeric_limits<double>::infinity();
    default:
      return 0.5;
  }
}

void mutate(Input& in, Call* c) {
  const int count = in.byte() % 9;
  for (int m = 0; m < count; ++m) {
    const uint8_t kind = in.byte() % 10;
    if (kind == 8 && !c->ints.empty()) {
      c->ints[in.byte() % c->ints.size()].set(interesting_int(in));
      continue;
    }
    if (kind == 9 && !c->floats.empty()) {
      c->floats[in.byte() % c->floats.size()].set(interesting_float(in));
      continue;
    }
    Field& f = c->fields[in.byte() % c->fields.size()];
    TensorView& v = *f.view;
    const int d = in.byte() % kMaxDims;
    switch (kind) {
      case 0:
        v.ndim = in.pick({0, 1, 2, 3, 4, 5, 6, 7, -1, 100});
        break;
      case 1:
        v.shape[d] = interesting_int(in);
        break;
      case 2:
        v.strides[d] = interesting_int(in);
        break;
      case 3:
        v.dtype = static_cast<DType>(in.byte() % 8);
        break;
      case 4:
        v.device = in.pick({Device::cuda(0), Device::cuda(-1),
                            Device{static_cast<DeviceType>(7), 0}, Device{DeviceType::kCPU, 3}});
        break;
      case 5:
        f.present = !f.present;
        break;
      case 6: {
        const Field& other = c->fields[in.byte() % c->fields.size()];
        const TensorView keep = v;
        v = *other.view;
        v.data = keep.data;
        break;
      }
      default:  // off by one (wrapping, so that INT64_MAX + 1 is INT64_MIN)
        v.shape[d] = static_cast<int64_t>(static_cast<uint64_t>(v.shape[d]) +
                                          static_cast<uint64_t>(in.pick<int64_t>({1, -1})));
        break;
    }
  }
}

// ---- buffers -------------------------------------------------------------------------------

// Bytes from the first to one past the last element, or -1 when the view cannot be backed
// (invalid rank or layout, overflow, or larger than kMaxTensorBytes).
int64_t span_bytes(const TensorView& v) {
  if (v.ndim < 0 || v.ndim > kMaxDims) return -1;
  int64_t last = 0;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.shape[d] < 0 || v.strides[d] < 0) return -1;
    if (v.shape[d] == 0) return 0;
    int64_t reach = 0;
    if (__builtin_mul_overflow(v.shape[d] - 1, v.strides[d], &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      return -1;
    }
  }
  int64_t bytes = 0;
  if (__builtin_add_overflow(last, 1, &bytes) ||
      __builtin_mul_overflow(bytes, dtype_size(v.dtype), &bytes) || bytes > kMaxTensorBytes) {
    return -1;
  }
  return bytes;
}

// Logical element count, or -1 past kMaxRunElements (or invalid).
int64_t bounded_numel(const TensorView& v) {
  if (v.ndim < 0 || v.ndim > kMaxDims) return -1;
  int64_t n = 1;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.shape[d] < 0 || __builtin_mul_overflow(n, v.shape[d], &n) || n > kMaxRunElements) {
      return -1;
    }
  }
  return n;
}

// One allocation: guard, exactly `bytes` of data, guard. The guards are filled with kGuardByte
// and poisoned under AddressSanitizer.
class Buffer {
 public:
  explicit Buffer(int64_t bytes) : bytes_(bytes) {
    const size_t total = static_cast<size_t>(bytes + 2 * kGuard);
    mem_.reset(static_cast<uint8_t*>(std::aligned_alloc(256, (total + 255) / 256 * 256)));
    std::memset(mem_.get(), kGuardByte, total);
    MSA_POISON(mem_.get(), kGuard);
    MSA_POISON(data() + bytes_, kGuard);
  }
  ~Buffer() {
    if (mem_ != nullptr) {
      MSA_UNPOISON(mem_.get(), kGuard);
      MSA_UNPOISON(data() + bytes_, kGuard);
    }
  }
  Buffer(Buffer&&) = default;
  Buffer& operator=(Buffer&&) = default;
  uint8_t* data() const { return mem_.get() + kGuard; }
  int64_t bytes() const { return bytes_; }
  std::vector<uint8_t> snapshot() const { return std::vector<uint8_t>(data(), data() + bytes_); }
  void restore(const std::vector<uint8_t>& s) const {
    if (!s.empty()) std::memcpy(data(), s.data(), s.size());
  }
  void check_guards(const std::string& name) const {
    MSA_UNPOISON(mem_.get(), kGuard);
    MSA_UNPOISON(data() + bytes_, kGuard);
    for (int64_t i = 0; i < kGuard; ++i) {
      if (mem_.get()[i] != kGuardByte || data()[bytes_ + i] != kGuardByte) {
        fail(name + ": a guard byte next to its buffer was written");
      }
    }
    MSA_POISON(mem_.get(), kGuard);
    MSA_POISON(data() + bytes_, kGuard);
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  int64_t bytes_;
  std::unique_ptr<uint8_t, Free> mem_;
};

void store_value(uint8_t* p, DType dtype, int64_t v) {
  if (dtype == DType::kI64) {
    std::memcpy(p, &v, 8);
  } else if (dtype == DType::kI32) {
    const int32_t w = static_cast<int32_t>(v);
    std::memcpy(p, &w, 4);
  }
}

// Fills a tensor's buffer: integer roles get values in [lo, hi] (cu_seqlens non-decreasing from
// 0), occasionally wild ones; other tensors get bytes of the input (scales: positive floats).
void fill(Input& in, const Field& f, const Buffer& b) {
  const DType dt = f.view->dtype;
  const int64_t es = dtype_size(dt);
  const bool integer = dt == DType::kI32 || dt == DType::kI64;
  if (f.role == Role::kFlags) {
    std::memset(b.data(), 0, static_cast<size_t>(b.bytes()));
    if (integer && b.bytes() >= es && in.rare(4)) store_value(b.data(), dt, 1 << 30);
    return;
  }
  if (!integer || f.role == Role::kData || f.role == Role::kScale) {
    for (int64_t i = 0; i < b.bytes(); ++i) b.data()[i] = in.byte();
    if (f.role == Role::kScale && dt == DType::kF32) {
      for (int64_t i = 0; i + 4 <= b.bytes(); i += 4) {
        const float s = 0.01f + static_cast<float>(b.data()[i]) / 64.0f;
        std::memcpy(b.data() + i, &s, 4);
      }
    }
    return;
  }
  int64_t running = 0;
  for (int64_t i = 0; i + es <= b.bytes(); i += es) {
    int64_t v = 0;
    if (in.rare(16)) {
      v = interesting_int(in);
    } else if (f.role == Role::kCu) {
      v = i == 0 ? 0 : std::min(f.hi, running + in.range(0, 3));
      running = v;
    } else {
      v = f.lo + static_cast<int64_t>(in.byte()) % (f.hi - f.lo + 1);
    }
    store_value(b.data() + i, dt, v);
  }
}

// Element offsets of a view with bounded numel, in flat order.
std::vector<int64_t> element_offsets(const TensorView& v) {
  std::vector<int64_t> offsets;
  const int64_t n = bounded_numel(v);
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e, off = 0;
    for (int d = v.ndim - 1; d >= 0; --d) {
      off += (rest % v.shape[d]) * v.strides[d];
      rest /= v.shape[d];
    }
    offsets.push_back(off);
  }
  return offsets;
}

// Whether two elements of the view share memory (stride-0 or overlapping dimensions).
bool self_overlapping(const TensorView& v) {
  std::vector<int64_t> offsets = element_offsets(v);
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end();
}

// Whether an i32/i64 slot mapping names one non-negative slot twice.
bool repeats_a_slot(const TensorView& v) {
  if (v.dtype != DType::kI32 && v.dtype != DType::kI64) return false;
  std::set<int64_t> seen;
  for (int64_t off : element_offsets(v)) {
    int64_t slot = 0;
    if (v.dtype == DType::kI64) {
      std::memcpy(&slot, static_cast<const uint8_t*>(v.data) + off * 8, 8);
    } else {
      int32_t s32 = 0;
      std::memcpy(&s32, static_cast<const uint8_t*>(v.data) + off * 4, 4);
      slot = s32;
    }
    if (slot >= 0 && !seen.insert(slot).second) return true;
  }
  return false;
}

// ---- one call ------------------------------------------------------------------------------

void run_one(const uint8_t* data, size_t size) {
  Input in(data, size);
  AllArgs all;
  Call call;
  static void (*const kBuilders[])(Input&, AllArgs&, Call*) = {
      build_page16, build_index_decode, build_index_prefill, build_attn_decode, build_attn_prefill,
      build_dense,  build_metadata,     build_fused,         build_rope,        build_decode_step};
  const size_t op = in.byte() % (sizeof(kBuilders) / sizeof(kBuilders[0]));
  kBuilders[op](in, all, &call);
  mutate(in, &call);
  if (in.rare(4)) exercise_views(in, *call.fields[in.byte() % call.fields.size()].view);

  // Buffers. A view that cannot be backed points into a small poisoned block: check() must
  // reject it or the call is only checked.
  std::vector<Buffer> buffers;
  std::vector<int> buffer_of(call.fields.size(), -1);
  Buffer unbacked(0);
  bool runnable = true;
  for (size_t i = 0; i < call.fields.size(); ++i) {
    Field& f = call.fields[i];
    if (!f.present) {
      f.view->data = nullptr;
      continue;
    }
    const int64_t bytes = span_bytes(*f.view);
    if (bytes < 0 || bounded_numel(*f.view) < 0) {
      f.view->data = unbacked.data();
      runnable = false;
      continue;
    }
    buffers.emplace_back(bytes);
    buffer_of[i] = static_cast<int>(buffers.size() - 1);
    f.view->data = buffers.back().data();
  }
  for (size_t i = 0; i < call.fields.size(); ++i) {
    if (buffer_of[i] >= 0) fill(in, call.fields[i], buffers[static_cast<size_t>(buffer_of[i])]);
  }
  if (call.link) call.link(in);
  const int threads = in.pick({1, 2, 3});
  const int workspace_variant = in.pick({0, 0, 0, 1, 2});
  const bool rerun = in.rare(4);

  std::vector<std::vector<uint8_t>> before;
  for (const Buffer& b : buffers) before.push_back(b.snapshot());
  auto flags_index = [&]() -> int {
    for (size_t i = 0; i < call.fields.size(); ++i) {
      const Field& f = call.fields[i];
      if (f.role == Role::kFlags && buffer_of[i] >= 0 && f.view->dtype == DType::kI32 &&
          f.view->ndim == 1 && f.view->shape[0] == 1) {
        return buffer_of[i];
      }
    }
    return -1;
  };
  auto expect_unchanged = [&](const std::string& why, int except) {
    for (size_t b = 0; b < buffers.size(); ++b) {
      buffers[b].check_guards("buffer " + std::to_string(b));
      if (static_cast<int>(b) != except && buffers[b].snapshot() != before[b]) {
        for (size_t i = 0; i < call.fields.size(); ++i) {
          if (buffer_of[i] == static_cast<int>(b)) fail(call.fields[i].name + " changed: " + why);
        }
      }
    }
  };

  const Status checked = call.check();
  if (!checked.ok()) {
    const Status ran = call.run(Workspace{}, Stream{nullptr, threads});
    if (ran.code() != checked.code()) {
      fail("run() gave " + ran.to_string() + " after check() gave " + checked.to_string());
    }
    expect_unchanged("run() after a failing check()", -1);
    return;
  }
  if (!runnable) return;

  size_t ws_bytes = 0;
  const Status sized = call.workspace_size(&ws_bytes);
  if (sized.ok() && ws_bytes > static_cast<size_t>(kMaxWorkspaceBytes)) return;
  std::unique_ptr<Buffer> ws;
  Workspace workspace;
  if (sized.ok()) {
    const int64_t give = workspace_variant == 1 && ws_bytes > 0 ? static_cast<int64_t>(ws_bytes) - 1
                                                                : static_cast<int64_t>(ws_bytes);
    ws = std::make_unique<Buffer>(give);
    workspace = Workspace{workspace_variant == 2 ? nullptr : ws->data(), static_cast<size_t>(give)};
  }
  const Status ran = call.run(workspace, Stream{nullptr, threads});
  if (ws != nullptr) ws->check_guards("workspace");

  const int flags = flags_index();
  if (!ran.ok()) {
    // After a passing check() the only other failures are the workspace (its size not
    // computable, or one too small given on purpose) and tensors on a device without a backend.
    bool on_cuda = false;
    for (const Field& f : call.fields) on_cuda = on_cuda || (f.present && f.view->device.is_cuda());
    const bool expected =
        ran.code() == StatusCode::kOutOfRange ||
        (ran.code() == StatusCode::kInvalidArgument && !sized.ok()) ||
        (ran.code() == StatusCode::kWorkspaceTooSmall && workspace_variant != 0) ||
        (ran.code() == StatusCode::kNotSupported && on_cuda);
    if (!expected) fail("run() gave " + ran.to_string() + " after check() passed");
    if (ran.code() != StatusCode::kOutOfRange) {
      expect_unchanged("run() failed with " + ran.to_string(), -1);
      return;
    }
    expect_unchanged("run() returned out_of_range", flags);
    if (flags >= 0) {
      int32_t old_word = 0, new_word = 0;
      std::memcpy(&old_word, before[static_cast<size_t>(flags)].data(), 4);
      std::memcpy(&new_word, buffers[static_cast<size_t>(flags)].data(), 4);
      if ((new_word & old_word) != old_word || (new_word & ~old_word) == 0) {
        fail("out_of_range without a new error_flags bit: " + ran.to_string());
      }
    }
    return;
  }

  // Success: only elements of writable views changed, error_flags included in "unchanged".
  for (size_t i = 0; i < call.fields.size(); ++i) {
    if (buffer_of[i] < 0) continue;
    const Buffer& b = buffers[static_cast<size_t>(buffer_of[i])];
    b.check_guards(call.fields[i].name);
    const std::vector<uint8_t> now = b.snapshot();
    const std::vector<uint8_t>& was = before[static_cast<size_t>(buffer_of[i])];
    if (now == was) continue;
    const Field& f = call.fields[i];
    if (!f.writable || f.role == Role::kFlags) fail(f.name + " changed by a successful call");
    std::vector<bool> mask(now.size(), false);
    const int64_t es = dtype_size(f.view->dtype);
    for (int64_t off : element_offsets(*f.view)) {
      for (int64_t k = 0; k < es; ++k) mask[static_cast<size_t>(off * es + k)] = true;
    }
    for (size_t k = 0; k < now.size(); ++k) {
      if (now[k] != was[k] && !mask[k]) {
        fail(f.name + ": byte " + std::to_string(k) + " outside the view's elements changed");
      }
    }
  }

  if (!rerun) return;
  // The same call with another thread count gives the same bytes, unless the caller let two
  // writes land on one element (an output view overlapping itself, a slot named twice): which
  // one wins is unspecified (docs/api.md).
  for (const Field& f : call.fields) {
    if (!f.present || f.view->data == unbacked.data()) continue;
    if ((f.writable && self_overlapping(*f.view)) ||
        (f.role == Role::kSlot && repeats_a_slot(*f.view))) {
      return;
    }
  }
  std::vector<std::vector<uint8_t>> first;
  for (size_t b = 0; b < buffers.size(); ++b) {
    first.push_back(buffers[b].snapshot());
    buffers[b].restore(before[b]);
  }
  const Status again = call.run(workspace, Stream{nullptr, threads == 1 ? 3 : 1});
  if (!again.ok()) fail("a rerun with another thread count failed: " + again.to_string());
  for (size_t i = 0; i < call.fields.size(); ++i) {
    const int b = buffer_of[i];
    if (b >= 0 && buffers[static_cast<size_t>(b)].snapshot() != first[static_cast<size_t>(b)]) {
      fail(call.fields[i].name + " depends on the thread count");
    }
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace msa

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  msa::fuzz::run_one(data, size);
  return 0;
}
