// End-to-end engine runs on the CPU backend with a small model: reproducibility, preemption
// and recomputation, speculative rows, chunking, reuse and fp8 caches.
#include "engine/engine.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/runner.h"
#include "engine/topk_stats.h"
#include "engine_test_util.h"

namespace msa {
namespace engine {
namespace {

using test::small_engine;
using test::small_workload;

std::vector<uint64_t> checksums(const RunResult& r) {
  std::vector<uint64_t> c;
  for (const auto& q : r.requests) c.push_back(q.checksum);
  return c;
}

RunResult run(const EngineOptions& o, const std::vector<RequestSpec>& reqs) {
  RunResult r;
  const Status s = run_engine(o, reqs, nullptr, &r);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(r.blocks_in_use_at_end, 0);
  return r;
}

TEST(Engine, RunIsBitwiseReproducibleFromItsSeed) {
  const auto reqs = small_workload(6);
  const RunResult a = run(small_engine(reqs), reqs);
  const RunResult b = run(small_engine(reqs), reqs);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) EXPECT_EQ(a.steps[i].tokens, b.steps[i].tokens);
  EXPECT_EQ(checksums(a), checksums(b));
  // A different seed gives different activations.
  EngineOptions o = small_engine(reqs);
  o.runner.seed = 8;
  EXPECT_NE(checksums(run(o, reqs)), checksums(a));
}

TEST(Engine, OutputsDoNotDependOnThreadCount) {
  const auto reqs = small_workload(3);
  EXPECT_EQ(checksums(run(small_engine(reqs, 1), reqs)),
            checksums(run(small_engine(reqs, 2), reqs)));
}

TEST(Engine, PreemptionAndRecomputeMatchAnUninterruptedRun) {
  const auto reqs = small_workload(6);
  const RunResult big = run(small_engine(reqs), reqs);
  EXPECT_EQ(big.preemptions, 0);
  EngineOptions tiny = small_engine(reqs);
  tiny.scheduler.num_blocks = 16;  // one or two requests at a time
  const RunResult small = run(tiny, reqs);
  EXPECT_GT(small.preemptions, 0);
  EXPECT_GT(small.recomputed_tokens, 0);
  EXPECT_LE(small.peak_kv_blocks, 16);
  EXPECT_EQ(checksums(small), checksums(big));
}

TEST(Engine, ChunkSizeDoesNotChangeOutputs) {
  const auto reqs = small_workload(4);
  EngineOptions narrow = small_engine(reqs);
  narrow.scheduler.max_batch_tokens = 37;
  const RunResult a = run(narrow, reqs);
  for (const auto& s : a.steps) EXPECT_LE(s.tokens, 37);
  EXPECT_EQ(checksums(a), checksums(run(small_engine(reqs), reqs)));
}

TEST(Engine, SpeculativeRowsMatchPlainDecode) {
  const auto reqs = small_workload(4);
  EngineOptions spec = small_engine(reqs);
  spec.scheduler.spec_tokens = 3;
  spec.scheduler.spec_accept = 0.7;
  spec.scheduler.num_blocks = default_pool_blocks(reqs, 16, 3);
  const RunResult a = run(spec, reqs);
  EXPECT_GT(a.draft_accepted, 0);
  const RunResult b = run(small_engine(reqs), reqs);
  EXPECT_LT(a.steps.size(), b.steps.size());
  // Every position's output is the same whether it was computed as a draft row or alone.
  EXPECT_EQ(checksums(a), checksums(b));
}

TEST(Engine, PoissonArrivalsKeepPerRequestOutputs) {
  const auto reqs = small_workload(4);
  auto spread = reqs;
  for (size_t i = 0; i < spread.size(); ++i) spread[i].arrival_s = 0.05 * static_cast<double>(i);
  const RunResult a = run(small_engine(spread), spread);
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_GE(a.requests[i].ttft_s, 0.0);
    EXPECT_GE(a.requests[i].latency_s, a.requests[i].ttft_s);
  }
  EXPECT_EQ(checksums(a), checksums(run(small_engine(reqs), reqs)));
}

TEST(Engine, TopkReuseAndFp8CachesRun) {
  const auto reqs = small_workload(3);
  EngineOptions o = small_engine(reqs);
  o.runner.model.use_index_cache = true;
  o.runner.model.index_topk_freq = 2;
  o.runner.kv_dtype = DType::kE4M3;
  o.runner.index_dtype = DType::kE4M3;
  const RunResult r = run(o, reqs);
  int reuse = 0;
  for (LayerKind k : r.plan) reuse += k == LayerKind::kSparseReuse;
  EXPECT_EQ(reuse, 1);
  EXPECT_NE(checksums(r), checksums(run(small_engine(reqs), reqs)));
}

TEST(Engine, FidelitySamplesCoverRowsBeyondTopkReach) {
  const auto reqs = small_workload(3);
  EngineOptions o = small_engine(reqs);
  o.runner.fidelity_rows_per_step = 2;
  const RunResult r = run(o, reqs);
  ASSERT_FALSE(r.samples.empty());
  for (const auto& f : r.samples) {
    EXPECT_GE(f.position, 4 * 16);
    EXPECT_GE(f.rel_error, 0.0);
    EXPECT_GT(f.selected_mass, 0.0);
    EXPECT_LE(f.selected_mass, 1.0 + 1e-9);
  }
}

// Windows are aligned to multiples of their width, cut where the rows end, and count each
// block once however many rows (or entries of one row) select it; -1 entries are empty.
TEST(TopkUnion, CountsDistinctBlocksOfAlignedWindows) {
  // Rows at positions 6 .. 17, top-2 each: row i selects blocks {i / 4, 9} (row 8 also -1).
  const int64_t start = 6, n = 12;
  std::vector<int32_t> topk;
  for (int64_t i = 0; i < n; ++i) {
    topk.push_back(static_cast<int32_t>((start + i) / 4));
    topk.push_back(start + i == 8 ? -1 : 9);
  }
  TopkUnion u;
  add_request_rows(topk.data(), 2, start, n, &u);
  EXPECT_EQ(u.rows, 12);
  EXPECT_EQ(u.selected, 23);  // row 8 selects one block
  // Width 4: 6-7 {1, 9}, 8-11 {2, 9}, 12-15 {3, 9}, 16-17 {4, 9}.
  EXPECT_EQ(u.windows[0], 4);
  EXPECT_EQ(u.blocks[0], 8);
  // Width 8: 6-7 {1, 9}, 8-15 {2, 3, 9}, 16-17 {4, 9}.
  EXPECT_EQ(u.windows[1], 3);
  EXPECT_EQ(u.blocks[1], 2 + 3 + 2);
  // Width 16: 6-15 {1, 2, 3, 9}, 16-17 {4, 9}.
  EXPECT_EQ(u.windows[2], 2);
  EXPECT_EQ(u.blocks[2], 4 + 2);
  // Width 32: 6-17 {1, 2, 3, 4, 9}.
  EXPECT_EQ(u.windows[3], 1);
  EXPECT_EQ(u.blocks[3], 5);
  // A block repeated within a row counts once.
  const std::vector<int32_t> repeated = {3, 3, 3, -1};
  TopkUnion v;
  add_request_rows(repeated.data(), 4, 0, 1, &v);
  EXPECT_EQ(v.selected, 1);
  EXPECT_EQ(v.blocks[3], 1);
}

// --topk-union reads back every prefill index op's top-k: each row selects at most top-k blocks,
// a window at least as many as its rows do on average and at most rows x top-k, wider windows at
// least as many as narrower ones; the outputs do not change.
TEST(Engine, TopkUnionCountsEveryPrefillRowOfComputeLayers) {
  const auto reqs = small_workload(3);
  EngineOptions o = small_engine(reqs);
  const RunResult plain = run(o, reqs);
  o.runner.topk_union = true;
  const RunResult r = run(o, reqs);
  EXPECT_EQ(checksums(r), checksums(plain));
  int compute_layers = 0;
  for (LayerKind k : r.plan) compute_layers += k == LayerKind::kSparseCompute;
  int64_t prompt_rows = 0;
  for (const auto& q : reqs) prompt_rows += q.prompt_tokens;
  const TopkUnion& u = r.topk_union;
  EXPECT_EQ(u.rows, prompt_rows * compute_layers * o.runner.shape.num_index_heads);
  const int K = o.runner.model.sparse_topk_blocks;
  EXPECT_GT(u.selected, 0);
  EXPECT_LE(u.selected, u.rows * K);
  double prev = 0.0;
  for (int w = 0; w < kUnionWindowCount; ++w) {
    ASSERT_GT(u.windows[w], 0);
    const double mean = static_cast<double>(u.blocks[w]) / static_cast<double>(u.windows[w]);
    EXPECT_GE(mean, prev);
    EXPECT_LE(u.blocks[w], u.rows * K);
    EXPECT_GE(u.blocks[w] * kUnionWindows[w], u.selected);
    prev = mean;
  }
  EXPECT_EQ(plain.topk_union.rows, 0);
}

// The host reference of a fidelity sample runs its heads in parallel; the sample's bits must not
// depend on how many threads share them.
TEST(Engine, FidelitySamplesDoNotDependOnThreads) {
  const auto reqs = small_workload(3);
  EngineOptions o = small_engine(reqs);
  o.runner.fidelity_rows_per_step = 2;
  o.runner.threads = 1;
  const RunResult one = run(o, reqs);
  o.runner.threads = 3;
  const RunResult three = run(o, reqs);
  ASSERT_FALSE(one.samples.empty());
  ASSERT_EQ(one.samples.size(), three.samples.size());
  for (size_t i = 0; i < one.samples.size(); ++i) {
    EXPECT_EQ(one.samples[i].layer, three.samples[i].layer);
    EXPECT_EQ(one.samples[i].position, three.samples[i].position);
    EXPECT_EQ(one.samples[i].rel_error, three.samples[i].rel_error) << "sample " << i;
    EXPECT_EQ(one.samples[i].selected_mass, three.samples[i].selected_mass) << "sample " << i;
  }
}

// Checks that every step timed its indexer (when `indexer`) and attention in the stages of the
// row kinds it had, and left those of a kind it lacked at 0; returns whether the run had both
// a step of decode and prefill rows and a decode-only step.
bool stages_follow_row_kinds(const RunResult& r, bool indexer) {
  bool mixed = false, decode_only = false;
  for (const auto& s : r.steps) {
    const bool decode = s.decode_tokens > 0, prefill = s.prefill_tokens > 0;
    mixed |= decode && prefill;
    decode_only |= decode && !prefill;
    EXPECT_EQ(s.stages[kStageAttentionDecode] > 0.0, decode) << "step " << s.step;
    EXPECT_EQ(s.stages[kStageAttentionPrefill] > 0.0, prefill) << "step " << s.step;
    EXPECT_EQ(s.stages[kStageIndexerDecode] > 0.0, indexer && decode) << "step " << s.step;
    EXPECT_EQ(s.stages[kStageIndexerPrefill] > 0.0, indexer && prefill) << "step " << s.step;
  }
  return mixed && decode_only;
}

TEST(Engine, StagesSplitDecodeAndPrefillRows) {
  const auto reqs = small_workload(3);
  EXPECT_TRUE(stages_follow_row_kinds(run(small_engine(reqs), reqs), true))
      << "the workload no longer has both mixed and decode-only steps";
}

TEST(Engine, DenseBaselineRunsNoIndexer) {
  const auto reqs = small_workload(3);
  EngineOptions o = small_engine(reqs);
  o.runner.dense_everywhere = true;
  o.runner.fidelity_rows_per_step = 2;  // ignored: the baseline has no sparse rows
  const RunResult r = run(o, reqs);
  EXPECT_TRUE(r.samples.empty());
  // Dense attention is timed in the attention stages of its rows' kind.
  EXPECT_TRUE(stages_follow_row_kinds(r, false))
      << "the workload no longer has both mixed and decode-only steps";
}

// The setting reaches every attention and index op call; on the CPU backend (always batch
// invariant) the outputs are those of a run without it.
TEST(Engine, BatchInvariantReachesEveryAttentionAndIndexOp) {
  const auto reqs = small_workload(3);
  const RunResult plain = run(small_engine(reqs), reqs);
  EXPECT_EQ(plain.invariant_op_calls, 0);
  EXPECT_GT(plain.variant_op_calls, 0);
  EngineOptions o = small_engine(reqs);
  o.runner.batch_invariant = true;
  const RunResult inv = run(o, reqs);
  EXPECT_EQ(inv.variant_op_calls, 0);
  EXPECT_EQ(inv.invariant_op_calls, plain.variant_op_calls);
  EXPECT_EQ(checksums(inv), checksums(plain));
  // The dense baseline's attention calls too.
  o.runner.dense_everywhere = true;
  const RunResult dense = run(o, reqs);
  EXPECT_EQ(dense.variant_op_calls, 0);
  EXPECT_GT(dense.invariant_op_calls, 0);
}

// A prefill chunked over several steps moves the prompt-token count before any request
// finishes or any output token is produced; at the end every token is counted.
TEST(Engine, ProgressCountsPrefillTokens) {
  std::vector<RequestSpec> reqs(1);
  reqs[0].prompt_tokens = 200;
  reqs[0].output_tokens = 3;
  EngineOptions o = small_engine(reqs);
  o.scheduler.max_batch_tokens = 64;
  std::vector<Progress> seen;
  RunResult r;
  ASSERT_TRUE(run_engine(
                  o, reqs, [&](const Progress& p) { seen.push_back(p); }, &r)
                  .ok());
  ASSERT_GE(seen.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[static_cast<size_t>(i)].prompt_tokens, 64 * (i + 1));
    EXPECT_EQ(seen[static_cast<size_t>(i)].finished, 0);
    EXPECT_EQ(seen[static_cast<size_t>(i)].output_tokens, 0);
  }
  for (const Progress& p : seen) {
    EXPECT_EQ(p.prompt_total, 200);
    EXPECT_EQ(p.output_total, 3);
  }
  EXPECT_EQ(seen.back().prompt_tokens, 200);
  EXPECT_EQ(seen.back().output_tokens, 3);
  EXPECT_EQ(seen.back().finished, 1);
}

long peak_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// The runner's buffers for a small workload, as run_engine sizes them.
RunnerOptions small_runner() {
  const auto reqs = small_workload(3);
  const EngineOptions e = small_engine(reqs);
  RunnerOptions ro = e.runner;
  ro.num_blocks = e.scheduler.num_blocks;
  ro.max_batch_tokens = e.scheduler.max_batch_tokens;
  ro.max_requests = 3;
  ro.max_blocks_per_request = 20;
  ro.max_position = 320;
  return ro;
}

TEST(Engine, RunnerAllocatesExactlyItsPlan) {
  // The size check before allocation is only as good as the plan: it must list every buffer.
  for (DType kv : {DType::kBF16, DType::kE4M3}) {
    for (bool dense : {false, true}) {
      RunnerOptions ro = small_runner();
      ro.kv_dtype = kv;
      ro.index_dtype = kv;
      ro.dense_everywhere = dense;
      ro.model.use_index_cache = true;
      ro.model.index_topk_freq = 2;
      int64_t planned = 0;
      ASSERT_TRUE(ModelRunner::plan_bytes(ro, &planned).ok());
      std::unique_ptr<ModelRunner> runner;
      const Status s = ModelRunner::create(ro, &runner);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(static_cast<int64_t>(runner->device_bytes()), planned)
          << dtype_name(kv) << (dense ? " dense" : " sparse");
    }
  }
}

TEST(Engine, RefusesBuffersLargerThanTheMachineBeforeAllocating) {
  // 2^30 tokens per step: the fused rows alone need 2^30 * 6 * 64 * 2 bytes = 768 GiB.
  RunnerOptions ro = small_runner();
  ro.max_batch_tokens = 1 << 30;
  std::unique_ptr<ModelRunner> runner;
  const Status s = ModelRunner::create(ro, &runner);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("GiB of host buffers"), std::string::npos) << s.to_string();
  EXPECT_EQ(runner, nullptr);
  // A size past int64 is an argument error too, not a wrapped allocation.
  ro.max_batch_tokens = 1 << 30;
  ro.model.max_position_embeddings = 1 << 30;
  ro.max_position = int64_t{1} << 62;
  int64_t planned = 0;
  EXPECT_EQ(ModelRunner::plan_bytes(ro, &planned).code(), StatusCode::kInvalidArgument);
}

TEST(Engine, ValidatesTheWorkloadBeforeAllocating) {
  // A request beyond max_position_embeddings with a pool of 2^30 pages (about 10 GB of
  // scheduler bookkeeping and far more of caches): the answer must come before any of it.
  const auto reqs = small_workload(1);
  EngineOptions o = small_engine(reqs);
  std::vector<RequestSpec> huge = reqs;
  huge[0].prompt_tokens = (int64_t{1} << 31) - 1;
  o.scheduler.num_blocks = 1 << 30;
  RunResult r;
  const long rss_before = peak_rss_kb();
  const Status s = run_engine(o, huge, nullptr, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("max_position_embeddings"), std::string::npos) << s.to_string();
  EXPECT_LT(peak_rss_kb() - rss_before, 256 * 1024) << "the engine allocated before validating";
  // Token counts past int32 positions are refused whatever the pool.
  huge[0].prompt_tokens = int64_t{1} << 40;
  const Status t = run_engine(o, huge, nullptr, &r);
  EXPECT_EQ(t.code(), StatusCode::kInvalidArgument) << t.to_string();
}

}  // namespace
}  // namespace engine
}  // namespace msa
