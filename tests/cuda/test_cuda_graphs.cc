// CUDA-graph safety of every op: each op is captured once in global capture mode (which fails
// on hidden synchronisation, legacy-stream use and allocation APIs), then replayed with other
// device-side batch contents under the same shapes (the batch shrinking and growing through
// seq_lens, padded requests and cu_seqlens_q). Every replay must equal, bitwise, an eager run
// on the same inputs; repeated eager runs must be bitwise identical; capture must not allocate
// device memory; a bad block id inside a replay must raise the error flag.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/paging.h"
#include "common/test_tensor.h"
#include "msa/attention.h"
#include "msa/cache.h"
#include "msa/fused_qknorm_rope.h"
#include "msa/indexer.h"
#include "msa/metadata.h"
#include "ops/attention_cases.h"

namespace msa {
namespace test {
namespace {

#define ASSERT_CUDA_OK(expr)                                               \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// A non-blocking stream (capture is not allowed on the legacy default stream).
class CudaStream {
 public:
  CudaStream() { cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); }
  ~CudaStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }
  Stream msa() const { return Stream{stream_, 0}; }

 private:
  cudaStream_t stream_ = nullptr;
};

class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  cudaGraph_t* graph() { return &graph_; }
  cudaGraphExec_t* exec() { return &exec_; }
  cudaGraphExec_t get() const { return exec_; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// One op under test. `load(v)` uploads the inputs of batch variant v (restoring every tensor an
// op modifies in place) and poisons the outputs; `run` launches the op on the stream with a
// workspace allocated beforehand; `outputs` are downloaded and compared bitwise.
struct GraphCase {
  std::function<void(int)> load;
  std::function<Status(Stream)> run;
  std::vector<TestTensor*> outputs;
  int variants = 1;
};

using Snapshot = std::vector<std::vector<uint8_t>>;

Snapshot download(const GraphCase& c) {
  Snapshot s;
  for (TestTensor* t : c.outputs) {
    t->download();
    s.push_back(t->host_bytes());
  }
  return s;
}

// Uploads variant v and waits: uploads and poisoning run on the legacy stream, which does not
// order with a non-blocking stream.
void load_variant(const GraphCase& c, int v) {
  c.load(v);
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

void expect_same(const Snapshot& got, const Snapshot& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i] == want[i]) << what << ": output " << i << " differs";
  }
}

// Captures c.run in global mode into `g`, checking that capture succeeds and allocates nothing.
void capture(const GraphCase& c, const CudaStream& stream, GraphExec* g) {
  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_CUDA_OK(cudaMemGetInfo(&free_before, &total));
  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
  const Status st = c.run(stream.msa());
  const cudaError_t end = cudaStreamEndCapture(stream.get(), g->graph());
  ASSERT_TRUE(st.ok()) << "op during capture: " << st.to_string();
  ASSERT_EQ(end, cudaSuccess) << "capture: " << cudaGetErrorString(end);
  ASSERT_CUDA_OK(cudaMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_before, free_after) << "device memory was allocated during capture";
  ASSERT_CUDA_OK(cudaGraphInstantiate(g->exec(), *g->graph(), 0));
}

// The whole check: eager runs of every variant (twice, bitwise equal), one capture, then
// replays over variants 0, 1, ..., n-1, 0 compared with the eager results.
void check_graph_replay(const GraphCase& c) {
  CudaStream stream;
  ASSERT_NE(stream.get(), nullptr);
  std::vector<Snapshot> eager;
  for (int v = 0; v < c.variants; ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    load_variant(c, v);
    Status st = c.run(stream.msa());
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream.get()));
    eager.push_back(download(c));
    load_variant(c, v);
    st = c.run(stream.msa());
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream.get()));
    expect_same(download(c), eager.back(), "repeated eager run");
  }

  load_variant(c, 0);
  GraphExec g;
  capture(c, stream, &g);
  if (::testing::Test::HasFatalFailure()) return;
  std::vector<int> order(static_cast<size_t>(c.variants));
  std::iota(order.begin(), order.end(), 0);
  order.push_back(0);
  for (int v : order) {
    SCOPED_TRACE("replay of variant " + std::to_string(v));
    load_variant(c, v);
    ASSERT_CUDA_OK(cudaGraphLaunch(g.get(), stream.get()));
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream.get()));
    expect_same(download(c), eager[static_cast<size_t>(v)], "graph replay vs eager");
  }
}

// Workspace of an op, allocated on the device before any capture.
template <typename Args>
std::unique_ptr<attn::DeviceBuffer> make_workspace(const Args& args) {
  size_t bytes = 0;
  const Status st = workspace_size(args, &bytes);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return std::make_unique<attn::DeviceBuffer>(test_device(), bytes);
}

void set_all(TestTensor& t, const std::vector<int64_t>& values) {
  ASSERT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (size_t i = 0; i < values.size(); ++i) {
    t.set_flat(static_cast<int64_t>(i), static_cast<double>(values[i]));
  }
}

// A block table [requests, max_blocks] whose every entry is a distinct valid page, so any
// sequence length up to max_blocks * block_size is servable.
TestTensor full_block_table(int64_t requests, int64_t max_blocks, int64_t num_blocks,
                            std::mt19937_64& rng) {
  std::vector<int64_t> pages(static_cast<size_t>(num_blocks));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  TestTensor t(DType::kI32, {requests, max_blocks}, test_device());
  for (int64_t i = 0; i < requests * max_blocks; ++i) {
    t.set_flat(i, static_cast<double>(pages.at(static_cast<size_t>(i))));
  }
  t.upload();
  return t;
}

TEST(CudaGraphs, RopeCache) {
  MSA_REQUIRE_TEST_DEVICE();
  TestTensor table(DType::kF32, {4096, 64}, test_device());
  RopeCacheArgs a;
  a.theta = 5e6;
  a.cos_sin_out = table.view();
  auto ws = make_workspace(a);
  GraphCase c;
  c.load = [&](int) { table.poison_device(); };
  c.run = [&](Stream s) { return run(a, ws->workspace(), s); };
  c.outputs = {&table};
  check_graph_replay(c);
}

TEST(CudaGraphs, BatchMetadata) {
  MSA_REQUIRE_TEST_DEVICE();
  const Device dev = test_device();
  std::mt19937_64 rng(7);
  const int64_t batch = 6, nd = 3, max_blocks = 8, block_size = 16, capacity = 80;
  TestTensor query_lens(DType::kI32, {batch}, dev), seq_lens(DType::kI32, {batch}, dev);
  TestTensor bt = full_block_table(batch, max_blocks, 64, rng);
  TestTensor ibt = full_block_table(batch, max_blocks, 48, rng);
  TestTensor qsl(DType::kI32, {batch + 1}, dev), cu_q(DType::kI32, {batch - nd + 1}, dev),
      cu_k(DType::kI32, {batch - nd + 1}, dev), ctx(DType::kI32, {batch}, dev),
      counts(DType::kI32, {batch}, dev), treq(DType::kI32, {capacity}, dev),
      tpos(DType::kI32, {capacity}, dev), slots(DType::kI64, {capacity}, dev),
      islots(DType::kI64, {capacity}, dev), totals(DType::kI32, {4}, dev),
      flags(DType::kI32, {1}, dev);
  BatchMetadataArgs a;
  a.num_decode_requests = static_cast<int>(nd);
  a.decode_query_len = 2;
  a.block_size = static_cast<int>(block_size);
  a.query_lens = query_lens.view();
  a.seq_lens = seq_lens.view();
  a.block_table = bt.view();
  a.index_block_table = ibt.view();
  a.query_start_loc = qsl.view();
  a.prefill_cu_seqlens_q = cu_q.view();
  a.prefill_cu_seqlens_k = cu_k.view();
  a.context_lens = ctx.view();
  a.kv_block_counts = counts.view();
  a.token_request = treq.view();
  a.token_position = tpos.view();
  a.slot_mapping = slots.view();
  a.index_slot_mapping = islots.view();
  a.totals = totals.view();
  a.error_flags = flags.view();
  auto ws = make_workspace(a);
  // Full batch, then a shrunken one (padded decode requests, one-token prefills), then a
  // batch that fills the token capacity.
  const std::vector<std::vector<int64_t>> q = {
      {2, 2, 2, 5, 9, 3}, {0, 2, 0, 1, 1, 1}, {2, 2, 2, 20, 20, 34}};
  const std::vector<std::vector<int64_t>> s = {
      {20, 40, 2, 30, 9, 100}, {0, 17, 0, 5, 1, 64}, {128, 128, 128, 120, 20, 128}};
  GraphCase c;
  c.variants = 3;
  c.load = [&](int v) {
    set_all(query_lens, q[static_cast<size_t>(v)]);
    set_all(seq_lens, s[static_cast<size_t>(v)]);
    query_lens.upload();
    seq_lens.upload();
    flags.fill_bytes(0);
    flags.upload();
    for (TestTensor* t :
         {&qsl, &cu_q, &cu_k, &ctx, &counts, &treq, &tpos, &slots, &islots, &totals}) {
      t->poison_device();
    }
  };
  c.run = [&](Stream st) { return run(a, ws->workspace(), st); };
  c.outputs = {&qsl, &cu_q, &cu_k, &ctx, &counts, &treq, &tpos, &slots, &islots, &totals, &flags};
  check_graph_replay(c);
  EXPECT_EQ(flags.get_flat(0), 0.0) << "valid batches raised an error flag";
}

TEST(CudaGraphs, FusedQkNormRopeSparseWithInserts) {
  MSA_REQUIRE_TEST_DEVICE();
  const Device dev = test_device();
  std::mt19937_64 rng(11);
  const int64_t tokens = 24, nq = 16, nkv = 1, niq = 1, d = 128, nb = 8, bs = 128;
  const int64_t width = (nq + 2 * nkv + niq + 1) * d, max_pos = 2048;
  TestTensor qkv(DType::kBF16, {tokens, width}, dev);
  qkv.fill_uniform(rng, -2.0, 2.0);
  const std::vector<uint8_t> qkv_init = qkv.host_bytes();
  TestTensor positions(DType::kI64, {tokens}, dev), slots(DType::kI64, {tokens}, dev),
      index_slots(DType::kI32, {tokens}, dev);
  TestTensor cos_sin(DType::kF32, {max_pos, 64}, dev);
  cos_sin.fill_uniform(rng, -1.0, 1.0);
  cos_sin.upload();
  TestTensor weights[4] = {TestTensor(DType::kBF16, {d}, dev), TestTensor(DType::kF32, {d}, dev),
                           TestTensor(DType::kBF16, {d}, dev), TestTensor(DType::kBF16, {d}, dev)};
  for (TestTensor& w : weights) {
    w.fill_uniform(rng, -0.5, 0.5);
    w.upload();
  }
  TestTensor cache(DType::kBF16, {nb, nkv, bs, 2 * d}, dev);
  TestTensor index_cache(DType::kBF16, {nb, bs, d}, dev);
  TestTensor q_out(DType::kBF16, {tokens, nq, d}, dev);
  TestTensor iq_out(DType::kE4M3, {tokens, niq, d}, dev);
  TestTensor flags(DType::kI32, {1}, dev);

  FusedQkNormRopeArgs a;
  a.mode = PreAttentionMode::kSparse;
  a.num_q_heads = static_cast<int>(nq);
  a.num_kv_heads = static_cast<int>(nkv);
  a.num_index_heads = static_cast<int>(niq);
  a.rotary_dim = 64;
  a.qkv = qkv.view();
  a.positions = positions.view();
  a.cos_sin_cache = cos_sin.view();
  a.q_norm_weight = weights[0].view();
  a.k_norm_weight = weights[1].view();
  a.index_q_norm_weight = weights[2].view();
  a.index_k_norm_weight = weights[3].view();
  a.slot_mapping = slots.view();
  ASSERT_TRUE(make_packed_kv_cache(cache.view(), &a.kv_cache).ok());
  a.index_slot_mapping = index_slots.view();
  a.index_cache = index_cache.view();
  a.q_out = q_out.view();
  a.index_q_out = iq_out.view();
  a.error_flags = flags.view();
  auto ws = make_workspace(a);

  GraphCase c;
  c.variants = 3;
  c.load = [&](int v) {
    // Variant v pads the last 6 v tokens (position -1) and skips every (v + 3)-th insert.
    std::vector<int64_t> pos, slot, islot;
    std::vector<int64_t> perm(static_cast<size_t>(nb * bs));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 vr(100 + static_cast<uint64_t>(v));
    std::shuffle(perm.begin(), perm.end(), vr);
    for (int64_t t = 0; t < tokens; ++t) {
      const bool pad = t >= tokens - 6 * v;
      pos.push_back(pad ? -1 : (t * 37 + v * 101) % max_pos);
      slot.push_back(t % (v + 3) == 0 ? -1 : perm[static_cast<size_t>(t)]);
      islot.push_back(perm[static_cast<size_t>(t + tokens)]);
    }
    set_all(positions, pos);
    set_all(slots, slot);
    set_all(index_slots, islot);
    qkv.host_bytes() = qkv_init;
    cache.fill_bytes(0);
    index_cache.fill_bytes(0);
    flags.fill_bytes(0);
    for (TestTensor* t : {&positions, &slots, &index_slots, &qkv, &cache, &index_cache, &flags}) {
      t->upload();
    }
    q_out.poison_device();
    iq_out.poison_device();
  };
  c.run = [&](Stream st) { return run(a, ws->workspace(), st); };
  c.outputs = {&qkv, &cache, &index_cache, &q_out, &iq_out, &flags};
  check_graph_replay(c);
  EXPECT_EQ(flags.get_flat(0), 0.0);
}

// Page-16 table and sparse decode share a decode batch whose requests are padded (seq_len 0)
// per variant: the batch shrinks and grows back.
attn::BatchSpec decode_spec() {
  attn::BatchSpec s;
  s.form = attn::Form::kDecode;
  s.num_q_heads = 16;
  s.num_kv_heads = 1;
  s.query_len = 2;
  s.seq_lens = {1000, 300, 129, 2400, 7};
  s.seed = 5;
  return s;
}

const std::vector<std::vector<bool>>& decode_padding() {
  static const std::vector<std::vector<bool>> pad = {{false, false, false, false, false},
                                                     {false, true, false, true, true},
                                                     {true, true, true, false, true}};
  return pad;
}

void load_decode_variant(attn::Batch& b, int v) {
  const std::vector<bool>& pad = decode_padding()[static_cast<size_t>(v)];
  for (size_t r = 0; r < pad.size(); ++r) {
    b.seq_lens.set_flat(static_cast<int64_t>(r),
                        pad[r] ? 0.0 : static_cast<double>(b.spec.seq_lens[r]));
  }
  b.seq_lens.upload();
  b.flags.fill_bytes(0);
  b.flags.upload();
}

TEST(CudaGraphs, SparsePage16) {
  MSA_REQUIRE_TEST_DEVICE();
  std::unique_ptr<attn::Batch> b = attn::make_batch(decode_spec(), test_device());
  const int64_t hkv = b->spec.num_kv_heads, k = b->spec.topk_width;
  TestTensor table(DType::kI32, {b->rows * hkv, k * 8}, test_device());
  TestTensor ctx(DType::kI32, {b->rows * hkv}, test_device());
  SparsePage16Args a;
  a.query_len = b->spec.query_len;
  a.page_stride = 16;
  a.block_size = 128;
  a.topk = b->topk.view();
  a.block_table = b->block_table.view();
  a.seq_lens = b->seq_lens.view();
  a.table_out = table.view();
  a.context_lens_out = ctx.view();
  a.error_flags = b->flags.view();
  auto ws = make_workspace(a);
  GraphCase c;
  c.variants = 3;
  c.load = [&](int v) {
    load_decode_variant(*b, v);
    table.poison_device();
    ctx.poison_device();
  };
  c.run = [&](Stream st) { return run(a, ws->workspace(), st); };
  c.outputs = {&table, &ctx, &b->flags};
  check_graph_replay(c);
  EXPECT_EQ(b->flags.get_flat(0), 0.0);
}

TEST(CudaGraphs, SparseAttentionDecode) {
  MSA_REQUIRE_TEST_DEVICE();
  std::unique_ptr<attn::Batch> b = attn::make_batch(decode_spec(), test_device());
  const SparseAttentionDecodeArgs a = attn::decode_args(*b);
  auto ws = make_workspace(a);
  GraphCase c;
  c.variants = 3;
  c.load = [&](int v) {
    load_decode_variant(*b, v);
    b->out.poison_device();
    b->lse.poison_device();
  };
  c.run = [&](Stream st) { return run(a, ws->workspace(), st); };
  c.outputs = {&b->out, &b->lse, &b->flags};
  check_graph_replay(c);
  EXPECT_EQ(b->flags.get_flat(0), 0.0);
}

// Prefill-shaped batches (sparse prefill, dense): variant v gives the last v requests no rows,
// so their rows become padding past cu_seqlens_q[B]; earlier rows keep their positions.
attn::BatchSpec prefill_spec(attn::Form form) {
  attn::BatchSpec s;
  s.form = form;
  s.num_q_heads = 16;
  s.num_kv_heads = 1;
  s.seq_lens = {300, 129, 2100, 7};
  s.query_lens = {5, 1, 6, 7};
  s.padding_rows = 3;
  s.seed = 9;
  return s;
}

void load_prefill_variant(attn::Batch& b, int v) {
  const int64_t nr = static_cast<int64_t>(b.spec.query_lens.size());
  int64_t row = 0;
  b.cu_seqlens.set_flat(0, 0.0);
  for (int64_t r = 0; r < nr; ++r) {
    if (r < nr - v) row += b.spec.query_lens[static_cast<size_t>(r)];
    b.cu_seqlens.set_flat(r + 1, static_cast<double>(row));
  }
  b.cu_seqlens.upload();
  b.flags.fill_bytes(0);
  b.flags.upload();
  b.out.poison_device();
  b.lse.poison_device();
}

// The same on shapes the tensor-core prefill kernels take (at least 8 rows per request, tiles
// that start and end mid-window), with NaN in the slots past the lengths.
attn::BatchSpec tensor_core_prefill_spec(attn::Form form) {
  attn::BatchSpec s = prefill_spec(form);
  s.seq_lens = {700, 300 + 130, 1500, 64};
  s.query_lens = {300, 130, 200, 64};
  s.nan_past_len = true;
  return s;
}

void check_prefill_form(const attn::BatchSpec& spec) {
  const attn::Form form = spec.form;
  std::unique_ptr<attn::Batch> b = attn::make_batch(spec, test_device());
  GraphCase c;
  c.variants = 3;
  c.load = [&](int v) { load_prefill_variant(*b, v); };
  std::unique_ptr<attn::DeviceBuffer> ws;
  if (form == attn::Form::kDense) {
    const DenseAttentionArgs a = attn::dense_args(*b);
    ws = make_workspace(a);
    c.run = [a, &ws](Stream st) { return run(a, ws->workspace(), st); };
  } else {
    const SparseAttentionPrefillArgs a = attn::prefill_args(*b);
    ws = make_workspace(a);
    c.run = [a, &ws](Stream st) { return run(a, ws->workspace(), st); };
  }
  c.outputs = {&b->out, &b->lse, &b->flags};
  check_graph_replay(c);
  EXPECT_EQ(b->flags.get_flat(0), 0.0);
}

TEST(CudaGraphs, SparseAttentionPrefill) {
  MSA_REQUIRE_TEST_DEVICE();
  check_prefill_form(prefill_spec(attn::Form::kPrefill));
}

TEST(CudaGraphs, DenseAttention) {
  MSA_REQUIRE_TEST_DEVICE();
  check_prefill_form(prefill_spec(attn::Form::kDense));
}

TEST(CudaGraphs, SparseAttentionPrefillTensorCore) {
  MSA_REQUIRE_TEST_DEVICE();
  check_prefill_form(tensor_core_prefill_spec(attn::Form::kPrefill));
}

// Sparse over an e4m3 cache with per-layer scales, read from the per-call bf16 copy.
TEST(CudaGraphs, SparseAttentionPrefillE4m3Copy) {
  MSA_REQUIRE_TEST_DEVICE();
  attn::BatchSpec s = tensor_core_prefill_spec(attn::Form::kPrefill);
  s.cache_dtype = DType::kE4M3;
  s.scale_mode = KvScaleMode::kPerLayer;
  check_prefill_form(s);
}

TEST(CudaGraphs, DenseAttentionPrefillTensorCore) {
  MSA_REQUIRE_TEST_DEVICE();
  check_prefill_form(tensor_core_prefill_spec(attn::Form::kDense));
}

// Dense over an e4m3 cache with per-token-head scales and at least 8 rows per block-table page:
// the pages are converted once per call into a bf16 copy inside the graph.
TEST(CudaGraphs, DenseAttentionPrefillE4m3Copy) {
  MSA_REQUIRE_TEST_DEVICE();
  attn::BatchSpec s = tensor_core_prefill_spec(attn::Form::kDense);
  s.cache_dtype = DType::kE4M3;
  s.scale_mode = KvScaleMode::kPerTokenHead;
  check_prefill_form(s);
}

// Indexer inputs: index_q [rows, heads, 128] and a bf16 index cache behind a block table whose
// every entry is valid, so seq_lens may change freely per variant.
struct IndexBatch {
  int64_t heads = 2, dim = 128, block_size = 128, requests = 4, max_blocks = 9, width = 16;
  TestTensor index_q, index_cache, block_table, seq_lens, cu, topk_out, flags;
};

std::unique_ptr<IndexBatch> make_index_batch(int64_t rows, DType dtype = DType::kBF16,
                                             int64_t heads = 2) {
  auto b = std::make_unique<IndexBatch>();
  b->heads = heads;
  const Device dev = test_device();
  std::mt19937_64 rng(21);
  const int64_t nb = b->requests * b->max_blocks + 3;
  b->index_q = TestTensor(dtype, {rows, b->heads, b->dim}, dev);
  b->index_q.fill_uniform(rng, -1.0, 1.0);
  b->index_q.upload();
  b->index_cache = TestTensor(dtype, {nb, b->block_size, b->dim}, dev);
  b->index_cache.fill_uniform(rng, -1.0, 1.0);
  b->index_cache.upload();
  b->block_table = full_block_table(b->requests, b->max_blocks, nb, rng);
  b->seq_lens = TestTensor(DType::kI32, {b->requests}, dev);
  b->cu = TestTensor(DType::kI32, {b->requests + 1}, dev);
  b->topk_out = TestTensor(DType::kI32, {b->heads, rows, b->width}, dev);
  b->flags = TestTensor(DType::kI32, {1}, dev);
  return b;
}

TEST(CudaGraphs, IndexTopkDecode) {
  MSA_REQUIRE_TEST_DEVICE();
  const int query_len = 2;
  std::unique_ptr<IndexBatch> b = make_index_batch(4 * query_len);
  IndexTopkDecodeArgs a;
  a.query_len = query_len;
  a.index_q = b->index_q.view();
  a.index_cache = b->index_cache.view();
  a.block_table = b->block_table.view();
  a.seq_lens = b->seq_lens.view();
  a.topk_out = b->topk_out.view();
  a.error_flags = b->flags.view();
  auto ws = make_workspace(a);
  const std::vector<std::vector<int64_t>> seq = {
      {1000, 300, 129, 5}, {0, 300, 0, 2}, {1152, 1152, 1152, 1152}};
  GraphCase c;
  c.variants = 3;
  c.load = [&](int v) {
    set_all(b->seq_lens, seq[static_cast<size_t>(v)]);
    b->seq_lens.upload();
    b->flags.fill_bytes(0);
    b->flags.upload();
    b->topk_out.poison_device();
  };
  c.run = [&](Stream st) { return run(a, ws->workspace(), st); };
  c.outputs = {&b->topk_out, &b->flags};
  check_graph_replay(c);
  EXPECT_EQ(b->flags.get_flat(0), 0.0);
}

// Graph replay of prefill batches with q[v] rows and lengths seq[v] per request in variant v.
void check_index_prefill_graph(IndexBatch* b, const std::vector<std::vector<int64_t>>& q,
                               const std::vector<std::vector<int64_t>>& seq) {
  IndexTopkPrefillArgs a;
  a.index_q = b->index_q.view();
  a.index_cache = b->index_cache.view();
  a.block_table = b->block_table.view();
  a.cu_seqlens_q = b->cu.view();
  a.seq_lens = b->seq_lens.view();
  a.topk_out = b->topk_out.view();
  a.error_flags = b->flags.view();
  auto ws = make_workspace(a);
  GraphCase c;
  c.variants = static_cast<int>(q.size());
  c.load = [&](int v) {
    std::vector<int64_t> cu = {0};
    for (int64_t n : q[static_cast<size_t>(v)]) cu.push_back(cu.back() + n);
    set_all(b->cu, cu);
    set_all(b->seq_lens, seq[static_cast<size_t>(v)]);
    b->cu.upload();
    b->seq_lens.upload();
    b->flags.fill_bytes(0);
    b->flags.upload();
    b->topk_out.poison_device();
  };
  c.run = [&](Stream st) { return run(a, ws->workspace(), st); };
  c.outputs = {&b->topk_out, &b->flags};
  check_graph_replay(c);
  EXPECT_EQ(b->flags.get_flat(0), 0.0);
}

// e4m3 keys, 32 heads over 1100 rows: the tensor-core scorer converts the keys once per call
// into its f16 copy inside the graph.
TEST(CudaGraphs, IndexTopkPrefillE4m3KeyCopy) {
  MSA_REQUIRE_TEST_DEVICE();
  std::unique_ptr<IndexBatch> b = make_index_batch(1100, DType::kE4M3, 32);
  check_index_prefill_graph(b.get(), {{300, 300, 300, 200}, {300, 100, 0, 0}, {1, 1, 1, 1000}},
                            {{600, 300, 1000, 1152}, {600, 100, 50, 0}, {1152, 1, 500, 1152}});
}

TEST(CudaGraphs, IndexTopkPrefill) {
  MSA_REQUIRE_TEST_DEVICE();
  const int64_t rows = 24;
  std::unique_ptr<IndexBatch> b = make_index_batch(rows);
  // Full, shrunken (empty requests, rows past cu_seqlens_q[B]) and regrown batches.
  check_index_prefill_graph(b.get(), {{6, 6, 6, 6}, {6, 3, 0, 0}, {1, 1, 1, 21}},
                            {{600, 6, 1000, 130}, {600, 100, 50, 0}, {1152, 1, 500, 1152}});
}

// A used block-table entry pointing outside the cache, written after capture: the replay must
// raise kDeviceErrorBlockId (and not fault).
template <typename Args>
void expect_flag_in_replay(attn::Batch& b, const Args& a, int64_t request, int64_t block) {
  auto ws = make_workspace(a);
  CudaStream stream;
  b.flags.fill_bytes(0);
  b.flags.upload();
  GraphExec g;
  GraphCase c;
  c.run = [&](Stream st) { return run(a, ws->workspace(), st); };
  capture(c, stream, &g);
  if (::testing::Test::HasFatalFailure()) return;
  b.block_table.set({request, block}, static_cast<double>(b.cache->spec().num_blocks + 5));
  b.block_table.upload();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ASSERT_CUDA_OK(cudaGraphLaunch(g.get(), stream.get()));
  ASSERT_CUDA_OK(cudaStreamSynchronize(stream.get()));
  b.flags.download();
  EXPECT_NE(static_cast<int32_t>(b.flags.get_flat(0)) & kDeviceErrorBlockId, 0)
      << "block id error not flagged inside the replay";
}

TEST(CudaGraphs, BadBlockIdFlaggedInReplayDense) {
  MSA_REQUIRE_TEST_DEVICE();
  std::unique_ptr<attn::Batch> b =
      attn::make_batch(prefill_spec(attn::Form::kDense), test_device());
  expect_flag_in_replay(*b, attn::dense_args(*b), /*request=*/0, /*block=*/1);
}

TEST(CudaGraphs, BadBlockIdFlaggedInReplaySparseDecode) {
  MSA_REQUIRE_TEST_DEVICE();
  std::unique_ptr<attn::Batch> b = attn::make_batch(decode_spec(), test_device());
  // The own block of request 0's rows is always selected.
  const int64_t own = (b->spec.seq_lens[0] - 1) / b->spec.block_size;
  expect_flag_in_replay(*b, attn::decode_args(*b), /*request=*/0, own);
}

}  // namespace
}  // namespace test
}  // namespace msa
